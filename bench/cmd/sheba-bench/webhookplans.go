package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

// wholeTableScan matches what store's TestHotQueryPlans fails on: a plan
// that reads a big webhook table whole.
var wholeTableScan = regexp.MustCompile(`Seq Scan on webhook_(deliveries|events)\b`)

// envPlans is where store's TestHotQueryPlans writes the plans it checked.
const envPlans = "SHEBA_PLANS"

// plans runs store's TestHotQueryPlans, which writes the plans of the
// delivery path's queries to path, and counts them and the whole-table
// reads among them.
func (b *bench) plans(ctx context.Context, path string) (figureRow, error) {
	rel, _ := filepath.Rel(b.repo, path)
	rep := figureRow{About: "EXPLAIN ANALYZE of the delivery path's queries at 180,000 deliveries, steady and with 105,000 pending (store TestHotQueryPlans), in " + rel}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return rep, err
	}
	cmd := exec.CommandContext(ctx, b.opts.goCmd, "test", "-count=1", "-run", "^TestHotQueryPlans$", "./store")
	cmd.Dir = b.repo
	cmd.Env = append(os.Environ(), envPlans+"="+path)
	out, err := cmd.CombinedOutput()
	text, rerr := os.ReadFile(path)
	if rerr != nil {
		return rep, fmt.Errorf("TestHotQueryPlans wrote no plans (%v): %v\n%s", rerr, err, lastLines(string(out), 30))
	}
	whole := len(wholeTableScan.FindAll(text, -1))
	if err != nil && whole == 0 {
		return rep, fmt.Errorf("TestHotQueryPlans: %v\n%s", err, lastLines(string(out), 30))
	}
	rep.Figures = []figure{
		fig("plans checked", float64(bytes.Count(text, []byte("Query Text:"))), ""),
		goalFig("whole reads of webhook_deliveries or webhook_events", float64(whole), "", "==", 0),
	}
	return rep, nil
}
