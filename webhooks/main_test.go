package webhooks

import (
	"os"
	"testing"

	"github.com/shebasvc/sheba/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(storetest.Run(m)) }
