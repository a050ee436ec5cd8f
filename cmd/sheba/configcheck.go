package main

import (
	"flag"
	"fmt"
	"io"
)

// configCmd runs `sheba config check [--config FILE]`. It loads the
// configuration exactly as serve does (the file, then the environment's
// overrides, then validation) and connects nowhere, so a deployment can vet
// a config file before it rolls out (docs/deployment.md). An invalid config
// is a usage error: one line naming the key on stderr, exit status 2. A
// valid one that is likely a mistake (config.Config.Warnings) gets a
// warning line each on stderr and still exits 0.
func configCmd(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "check" {
		return usagef("config: want 'config check [--config FILE]'")
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file")
	if err := noArgs(fs, args[1:]); err != nil {
		return err
	}
	path := *configPath
	if path == "" {
		path, _ = lookup("SHEBA_CONFIG")
	}
	cfg, err := loadServeConfig(path, lookup)
	if err != nil {
		return err
	}
	// Allowed, so still ok, but said: serve logs the same lines.
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "sheba: warning:", w)
	}
	source := "defaults and environment, no file"
	if path != "" {
		source = path + " and environment"
	}
	_, err = fmt.Fprintf(stdout, "config ok (%s)\n", source)
	return err
}
