package faults

import (
	"os"
	"testing"

	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) {
	// Process-wide, once, as the command does.
	app.Prepare(nil)
	os.Exit(storetest.Run(m))
}
