package main

import (
	"strings"
	"testing"
)

// scan is a govulncheck JSON stream (protocol v1): a symbol-level scan
// with Go go1.26.8, and the findings given.
func scan(findings ...string) string {
	return `{"config":{"protocol_version":"v1.0.0","scanner_name":"govulncheck","go_version":"go1.26.8","scan_level":"symbol","scan_mode":"source"}}
{"progress":{"message":"Scanning your code..."}}
{"osv":{"id":"GO-1","summary":"a bug in a module"}}
` + strings.Join(findings, "\n")
}

const (
	// called: a dependency's vulnerable function, called from our code.
	calledModule = `{"finding":{"osv":"GO-1","fixed_version":"v1.2.4","trace":[
		{"module":"example.com/dep","version":"v1.2.3","package":"example.com/dep/x","function":"Parse"},
		{"module":"github.com/shebasvc/sheba","package":"github.com/shebasvc/sheba/server","function":"Get","receiver":"*Server","position":{"filename":"server/server.go","line":10,"column":2}}]}}`
	calledModuleNoFix = `{"finding":{"osv":"GO-2","trace":[{"module":"example.com/dep","version":"v1.2.3","package":"example.com/dep/x","function":"Parse"}]}}`
	// The same vulnerability found at module level only: not called.
	requiredModule = `{"finding":{"osv":"GO-3","fixed_version":"v0.2.0","trace":[{"module":"example.com/other","version":"v0.1.0"}]}}`
	stdlibNewer    = `{"finding":{"osv":"GO-4","fixed_version":"v1.26.9","trace":[{"module":"stdlib","version":"v1.26.8","package":"net/http","function":"Do","receiver":"*Client"}]}}`
	stdlibOlder    = `{"finding":{"osv":"GO-5","fixed_version":"v1.26.8","trace":[{"module":"stdlib","version":"v1.26.7","package":"net/http","function":"Get"}]}}`
	stdlibRC       = `{"finding":{"osv":"GO-6","fixed_version":"v1.27.0-rc.1","trace":[{"module":"toolchain","version":"v1.26.8","package":"cmd/go","function":"Run"}]}}`
	stdlibImported = `{"finding":{"osv":"GO-7","fixed_version":"v1.26.8","trace":[{"module":"stdlib","version":"v1.26.7","package":"net/mail"}]}}`
)

func TestRun(t *testing.T) {
	for _, test := range []struct {
		name, in, toolchain string
		want                int
		out                 []string // parts of the output
	}{
		{"nothing found", scan(), "go1.26.8", 0, []string{"0 called vulnerabilities"}},
		{"a called module", scan(calledModule, requiredModule), "go1.26.8", 1,
			[]string{"FAIL GO-1 example.com/dep@v1.2.3 (fixed in v1.2.4): a bug in a module",
				"server/server.go:10:2: github.com/shebasvc/sheba/server.Server.Get calls example.com/dep/x.Parse",
				"1 to fix now, 0 waiting", "1 more in code imported or required but not called"}},
		{"a called module with no fix", scan(calledModuleNoFix), "go1.26.8", 1, []string{"FAIL GO-2 example.com/dep@v1.2.3 (no fix yet)"}},
		{"only required, not called", scan(requiredModule, stdlibImported), "go1.26.8", 0, []string{"2 more in code imported"}},
		{"the standard library, fixed in a newer Go", scan(stdlibNewer, stdlibRC), "go1.26.8", 0,
			[]string{"wait GO-4 net/http@go1.26.8 (fixed in go1.26.9, newer than the toolchain go1.26.8)",
				"wait GO-6 cmd/go@go1.26.8 (fixed in go1.27rc1, newer", "0 to fix now, 2 waiting"}},
		{"the standard library, fixed in the toolchain the machine lacks", scan(stdlibOlder), "go1.26.8", 1,
			[]string{"FAIL GO-5 net/http@go1.26.7 (fixed in go1.26.8)"}},
		{"the toolchain line raised past the fix", scan(stdlibNewer), "go1.26.9", 1, []string{"FAIL GO-4"}},
		{"not a scan", `{"progress":{"message":"x"}}`, "go1.26.8", 2, []string{"no govulncheck scan"}},
		{"a module-level scan", strings.Replace(scan(), `"symbol"`, `"module"`, 1), "go1.26.8", 2, []string{"want symbol"}},
		{"not JSON", "govulncheck: loading packages: ...", "go1.26.8", 2, []string{"reading govulncheck's output"}},
		{"no toolchain", scan(), "", 2, []string{"is not a Go version"}},
	} {
		t.Run(test.name, func(t *testing.T) {
			var out strings.Builder
			if got := run(strings.NewReader(test.in), &out, test.toolchain); got != test.want {
				t.Errorf("exit %d, want %d; output:\n%s", got, test.want, out.String())
			}
			for _, part := range test.out {
				if !strings.Contains(out.String(), part) {
					t.Errorf("output lacks %q:\n%s", part, out.String())
				}
			}
		})
	}
}
