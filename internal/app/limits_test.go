package app

import (
	"testing"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/ratelimit/redislimit"
)

// TestRedisDefaults: config's redis section defaults to redislimit's
// defaults, which redislimit documents as config's too (config cannot
// import redislimit to say them once).
func TestRedisDefaults(t *testing.T) {
	r := config.Default().Redis
	if r.Timeout != redislimit.DefaultTimeout || r.FallbackShare != redislimit.DefaultFallbackShare {
		t.Errorf("config's redis defaults: timeout %v, fallback_share %v; redislimit's: %v, %v",
			r.Timeout, r.FallbackShare, redislimit.DefaultTimeout, redislimit.DefaultFallbackShare)
	}
}
