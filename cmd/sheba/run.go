package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/gen/openapiv2"
	"github.com/shebasvc/sheba/gen/openapiv3"
	"github.com/shebasvc/sheba/interceptors/requestlog"
	"github.com/shebasvc/sheba/internal/app"
	"github.com/shebasvc/sheba/store"
)

const usage = `usage:
  sheba serve [--config FILE] [--migrate]   run the service
  sheba migrate up|down|status [--config FILE] [--force]
                                            apply, revert one step, or list migrations;
                                            down refuses to drop tables that hold rows
                                            unless --force
  sheba openapi [--version 2|3]             print the OpenAPI document: version 2
                                            (the default) or 3.1
  sheba config check [--config FILE]        validate the configuration, connect nowhere
  sheba apikey new --id NAME                print a new API key and its config entry
  sheba version                             print version, commit and Go version
The config file may also be given by SHEBA_CONFIG; every key can be set by
SHEBA_<SECTION>_<KEY>, and DATABASE_URL sets database.url.`

// usageError is a bad command line or configuration: main exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run reads the command line and the configuration and runs the command
// until ctx is done; serving is the assembly's (internal/app).
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("no command given\n%s", usage)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(ctx, rest, lookup, stderr)
	case "migrate":
		return migrate(ctx, rest, lookup, stdout)
	case "openapi":
		return openapiCmd(rest, stdout)
	case "config":
		return configCmd(rest, lookup, stdout, stderr)
	case "apikey":
		return apikeyCmd(rest, stdout)
	case "version":
		if err := noArgs(flag.NewFlagSet(cmd, flag.ContinueOnError), rest); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "sheba %s (commit %s, %s)\n", version, commit, runtime.Version())
		return err
	case "help", "-h", "--help":
		_, err := fmt.Fprintln(stdout, usage)
		return err
	default:
		return usagef("unknown command %q\n%s", cmd, usage)
	}
}

// parseFlags parses args into fs and rejects positional arguments beyond
// maxArgs.
func parseFlags(fs *flag.FlagSet, args []string, maxArgs int) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usagef("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > maxArgs {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(maxArgs))
	}
	return nil
}

func noArgs(fs *flag.FlagSet, args []string) error { return parseFlags(fs, args, 0) }

// configError is the usage error (exit 2) of a problem the assembly finds
// in a config key that config cannot check (the files of tls), naming the
// variable as config.Load does when the value came from the environment.
func configError(err error, lookup func(string) (string, bool)) error {
	if e, ok := errors.AsType[*config.Error](err); ok && e.Env == "" {
		// "tls.key_file" is SHEBA_TLS_KEY_FILE, as config derives it.
		env := "SHEBA_" + strings.ToUpper(strings.ReplaceAll(e.Key, ".", "_"))
		if v, _ := lookup(env); v != "" {
			e.Env = env
		}
	}
	return usagef("config: %v", err)
}

// loadConfig loads the file named by --config or SHEBA_CONFIG, with the
// environment's overrides, and validates it: for migrate; serve and config
// check use loadServeConfig.
func loadConfig(path string, lookup func(string) (string, bool)) (config.Config, error) {
	if path == "" {
		path, _ = lookup("SHEBA_CONFIG")
	}
	cfg, err := config.Load(path, lookup)
	if err != nil {
		return config.Config{}, usagef("config: %v", err)
	}
	return cfg, nil
}

// loadServeConfig is loadConfig, then the TLS files read and checked, before
// anything connects: a file that is missing, or a key of another
// certificate, is a bad value of its key. migrate serves nothing and needs
// no certificate (a migration Job need not mount them).
func loadServeConfig(path string, lookup func(string) (string, bool)) (config.Config, error) {
	cfg, err := loadConfig(path, lookup)
	if err != nil {
		return cfg, err
	}
	if err := app.CheckTLS(cfg.TLS); err != nil {
		return config.Config{}, configError(err, lookup)
	}
	return cfg, nil
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	// slog's JSON handler, on which the request line skips slog's record
	// (requestlog.JSONHandler).
	return slog.New(requestlog.NewJSONHandler(w, opts))
}

func serve(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file")
	doMigrate := fs.Bool("migrate", false, "apply migrations before serving")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	cfg, err := loadServeConfig(*configPath, lookup)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)

	if *doMigrate {
		if err := store.MigrateUp(ctx, cfg.Database.URL); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		log.InfoContext(ctx, "migrations applied")
	}
	a, err := app.New(ctx, cfg, log, app.WithEnv(lookup), app.WithVersion(version))
	if err != nil {
		return err
	}
	return a.ListenAndServe(ctx)
}

func migrate(ctx context.Context, args []string, lookup func(string) (string, bool), stdout io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file")
	force := fs.Bool("force", false, "migrate down: drop tables that hold rows")
	// The direction may come before or after the flags.
	var direction string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		direction, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args, 1); err != nil {
		return err
	}
	if direction == "" {
		direction = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usagef("migrate: unexpected argument %q", fs.Arg(0))
	}
	if direction != "up" && direction != "down" && direction != "status" {
		return usagef("migrate: want up, down or status, got %q", direction)
	}
	if *force && direction != "down" {
		return usagef("migrate: --force is for migrate down only")
	}
	cfg, err := loadConfig(*configPath, lookup)
	if err != nil {
		return err
	}
	url := cfg.Database.URL
	switch direction {
	case "up":
		return store.MigrateUp(ctx, url)
	case "down":
		err := store.MigrateDown(ctx, url, *force)
		// Not a failure: the command needs --force to go ahead.
		var full *store.TablesNotEmptyError
		if errors.As(err, &full) {
			return usagef("%v", err)
		}
		return err
	}
	states, err := store.MigrationStatus(ctx, url)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATE")
	for _, s := range states {
		state := "pending"
		if s.Applied {
			state = "applied"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", s.Version, s.Name, state)
	}
	return tw.Flush()
}

// openapiCmd prints an OpenAPI document: version 2 unless --version 3
// asks for 3.1 (/openapi.json and /openapi.v3.json).
func openapiCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("openapi", flag.ContinueOnError)
	v := fs.String("version", "2", "2 for OpenAPI 2, 3 for OpenAPI 3.1")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	doc, ok := map[string]string{"2": openapiv2.Document, "3": openapiv3.Document}[*v]
	if !ok {
		return usagef("openapi: --version: want 2 or 3, got %q", *v)
	}
	_, err := io.WriteString(stdout, doc)
	return err
}

func apikeyCmd(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "new" {
		return usagef("apikey: want 'apikey new --id NAME'")
	}
	fs := flag.NewFlagSet("apikey new", flag.ContinueOnError)
	id := fs.String("id", "", "identity of the caller, as it appears in metrics and logs")
	if err := noArgs(fs, args[1:]); err != nil {
		return err
	}
	if !config.ValidKeyID(*id) {
		return usagef("apikey new: --id must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return errors.New("apikey new: no randomness available")
	}
	key := base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(key))
	_, err := fmt.Fprintf(stdout, `API key (shown only now; give it to the caller, it is not stored):
%s

Config entry for auth.keys (only the SHA-256 of the key is kept):
  - { id: %q, sha256: "%s" }
`, key, *id, hex.EncodeToString(sum[:]))
	return err
}
