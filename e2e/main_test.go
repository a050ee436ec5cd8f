package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/shebasvc/sheba/e2e/shebaproc"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store/storetest"
)

// binDir holds the sheba binary of the tests that run it as a process,
// built on first use and removed after the last test.
var binDir string

func TestMain(m *testing.M) {
	// Process-wide, once, as the command does; grpc-go's own log stays
	// quiet in tests.
	app.Prepare(nil)
	dir, err := os.MkdirTemp("", "sheba-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := storetest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// shebaBinary is the sheba command, built once for every test of the
// package that needs it.
var shebaBinary = sync.OnceValues(func() (string, error) { return shebaproc.Build(binDir) })

// startSheba runs "sheba serve --migrate" on a fresh database, with env
// added to the environment, and waits until it is ready.
func startSheba(t *testing.T, env ...string) *shebaproc.Process {
	t.Helper()
	bin, err := shebaBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := shebaproc.New(t, bin, append([]string{"DATABASE_URL=" + storetest.NewDatabase(t)}, env...)...)
	p.Args = []string{"serve", "--migrate"}
	p.Start(t)
	p.WaitReady(t, 20*time.Second)
	return p
}
