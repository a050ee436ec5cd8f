// Command vulngate decides what CI does with govulncheck's findings
// (make vulncheck): it reads govulncheck's JSON output (-format json) on
// stdin, lists every vulnerability the code calls, and exits 1 when one of
// them is in reach of a fix:
//
//   - in a module (a dependency, or golang.org/x/...): fixed by a go get,
//     or with no fix at all, which needs the call gone;
//   - in the standard library or the go command, fixed in a Go no newer
//     than the toolchain the project is tested with (go.mod's toolchain
//     line, -toolchain): the machine runs an older Go than that.
//
// A standard-library vulnerability fixed only in a Go newer than the
// toolchain line is listed as waiting for that Go, and does not fail: the
// fix is a new toolchain, which CI (GOTOOLCHAIN=local, no download) cannot
// take by itself; raising the toolchain line once that Go is on the build
// machines turns it into a failure until it is used. Vulnerabilities in
// code that is imported or required but not called are counted only.
//
// govulncheck has no such policy of its own: its text mode fails on every
// called vulnerability, the standard library's included, and its JSON mode
// never fails. 2 means the input was not a govulncheck scan.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/version"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	toolchain := flag.String("toolchain", "", "the Go the project is tested with: go.mod's toolchain line, e.g. go1.26.8")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, *toolchain))
}

// The parts of govulncheck's JSON messages (golang.org/x/vuln's
// internal/govulncheck, protocol v1) that the policy reads.
type message struct {
	Config *struct {
		GoVersion string `json:"go_version"`
		ScanLevel string `json:"scan_level"`
	} `json:"config"`
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *finding `json:"finding"`
}

type finding struct {
	OSV          string  `json:"osv"`
	FixedVersion string  `json:"fixed_version"`
	Trace        []frame `json:"trace"`
}

// frame is one step of a finding's trace, the vulnerable symbol first.
type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
	Receiver string `json:"receiver"`
	Position *struct {
		Filename string `json:"filename"`
		Line     int    `json:"line"`
		Column   int    `json:"column"`
	} `json:"position"`
}

// called reports whether the code calls the vulnerable symbol: module and
// package findings name no function.
func (f finding) called() bool { return len(f.Trace) > 0 && f.Trace[0].Function != "" }

// inGo reports whether f is in the standard library or the go command,
// which only a newer Go fixes.
func (f finding) inGo() bool {
	return f.Trace[0].Module == "stdlib" || f.Trace[0].Module == "toolchain"
}

// waits reports whether f is fixed only in a Go newer than toolchain.
func (f finding) waits(toolchain string) bool {
	return f.inGo() && f.FixedVersion != "" && version.Compare(goVersion(f.FixedVersion), toolchain) > 0
}

// at is f's vulnerable module (or package of Go) at its version, and
// where the fix is.
func (f finding) at() (where, fix string) {
	top := f.Trace[0]
	if !f.inGo() {
		return top.Module + "@" + top.Version, f.FixedVersion
	}
	if f.FixedVersion == "" {
		return top.Package + "@" + goVersion(top.Version), ""
	}
	return top.Package + "@" + goVersion(top.Version), goVersion(f.FixedVersion)
}

// goVersion turns the semantic version govulncheck gives the standard
// library (v1.26.9, v1.27.0-rc.1) into a Go version (go1.26.9, go1.27rc1).
func goVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	base, pre, ok := strings.Cut(v, "-")
	if !ok {
		return "go" + v
	}
	return "go" + strings.TrimSuffix(base, ".0") + strings.ReplaceAll(pre, ".", "")
}

func run(in io.Reader, out io.Writer, toolchain string) int {
	if !version.IsValid(toolchain) {
		fmt.Fprintf(out, "vulngate: -toolchain %q is not a Go version such as go1.26.8\n", toolchain)
		return 2
	}
	summaries := map[string]string{}
	first := map[string]finding{} // the first called finding of each vulnerability
	notCalled := map[string]bool{}
	var goVer string
	dec := json.NewDecoder(in)
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintf(out, "vulngate: reading govulncheck's output: %v\n", err)
			return 2
		}
		switch {
		case m.Config != nil:
			if m.Config.ScanLevel != "symbol" {
				fmt.Fprintf(out, "vulngate: scan level %q, want symbol (govulncheck's default) to know what is called\n", m.Config.ScanLevel)
				return 2
			}
			goVer = m.Config.GoVersion
		case m.OSV != nil:
			summaries[m.OSV.ID] = m.OSV.Summary
		case m.Finding != nil && m.Finding.called():
			if _, ok := first[m.Finding.OSV]; !ok {
				first[m.Finding.OSV] = *m.Finding
			}
		case m.Finding != nil:
			notCalled[m.Finding.OSV] = true
		}
	}
	if goVer == "" {
		fmt.Fprintln(out, "vulngate: no govulncheck scan on stdin (run govulncheck -format json)")
		return 2
	}
	ids := make([]string, 0, len(first))
	for id := range first {
		ids = append(ids, id)
		delete(notCalled, id)
	}
	slices.Sort(ids)
	failed, waiting := 0, 0
	for _, id := range ids {
		f := first[id]
		where, fix := f.at()
		what, note := "FAIL", "fixed in "+fix
		switch {
		case f.waits(toolchain):
			what, note = "wait", fmt.Sprintf("fixed in %s, newer than the toolchain %s", fix, toolchain)
			waiting++
		case fix == "":
			note = "no fix yet"
			failed++
		default:
			failed++
		}
		fmt.Fprintf(out, "%s %s %s (%s): %s\n    %s\n", what, id, where, note, summaries[id], entry(f))
	}
	fmt.Fprintf(out, "vulngate (%s, toolchain %s): %d called vulnerabilities: %d to fix now, %d waiting for a newer Go; %d more in code imported or required but not called\n",
		goVer, toolchain, len(ids), failed, waiting, len(notCalled))
	if failed > 0 {
		return 1
	}
	return 0
}

// entry names where the code enters a finding's trace (its last frame
// with a position) and the vulnerable symbol it reaches.
func entry(f finding) string {
	for _, fr := range slices.Backward(f.Trace) {
		if fr.Position != nil {
			return fmt.Sprintf("%s:%d:%d: %s calls %s", fr.Position.Filename, fr.Position.Line, fr.Position.Column, fr.symbol(), f.Trace[0].symbol())
		}
	}
	return "calls " + f.Trace[0].symbol()
}

// symbol is the frame's function as package.Receiver.Function.
func (fr frame) symbol() string {
	if fr.Receiver == "" {
		return fr.Package + "." + fr.Function
	}
	return fr.Package + "." + strings.TrimPrefix(fr.Receiver, "*") + "." + fr.Function
}
