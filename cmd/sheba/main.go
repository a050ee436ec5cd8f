// Command sheba serves the sheba API over gRPC and REST, applies its
// database migrations, and prints its OpenAPI documents, API keys and
// version. Run `sheba help` for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/shebasvc/sheba/internal/app"
)

// Set at link time by the Makefile (-ldflags -X).
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	// Process-wide settings come before any server. grpc-go's logger may
	// be set only before gRPC runs: its own lines go to stderr as slog
	// JSON records (logger=grpc, warnings and errors) from here, before
	// the config (and log.format) is read.
	app.Prepare(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "sheba:", err)
	var uerr *usageError
	if errors.As(err, &uerr) {
		os.Exit(2)
	}
	os.Exit(1)
}
