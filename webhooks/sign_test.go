package webhooks_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/shebasvc/sheba/webhooks"
)

// The secret and message of the Standard Webhooks specification's example.
const (
	specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specBody   = `{"test": 2432232314}`
	specTS     = 1614265330
	specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignMatchesTheSpecification(t *testing.T) {
	got, err := webhooks.Sign(specSecret, specID, specTS, []byte(specBody))
	if err != nil {
		t.Fatal(err)
	}
	if got != specSig {
		t.Errorf("got %s, want %s", got, specSig)
	}
}

func TestSignVerifiesWithStandardWebhooks(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(specSecret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	body := []byte(`{"type":"account.created"}`)
	sig, err := webhooks.Sign(specSecret, "evt-1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "evt-1")
	h.Set("webhook-timestamp", strconv.FormatInt(now, 10))
	h.Set("webhook-signature", sig)
	if err := wh.Verify(body, h); err != nil {
		t.Errorf("Verify: %v", err)
	}
	h.Set("webhook-id", "evt-2")
	if err := wh.Verify(body, h); err == nil {
		t.Error("Verify with another id: got nil, want an error")
	}
}

func TestSignBadSecret(t *testing.T) {
	for _, secret := range []string{"", "whsec_", "whsec_!!!"} {
		if _, err := webhooks.Sign(secret, "id", 1, nil); err == nil {
			t.Errorf("Sign with secret %q: got nil, want an error", secret)
		}
	}
}
