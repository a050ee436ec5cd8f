//go:build prism

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shebasvc/sheba/e2e/resttest"
	"github.com/shebasvc/sheba/e2e/shebaproc"
	"github.com/shebasvc/sheba/gen/openapiv3"
)

// prismBin is Stoplight Prism as make test installs it (npm ci in
// tools/ts, pinned by its lockfile).
const prismBin = "../tools/ts/node_modules/.bin/prism"

// requestKind is what a request of TestPrismProxy is to the document.
type requestKind int

const (
	// valid: Prism reports no violation.
	valid requestKind = iota
	// invalid: the request breaks the document: Prism reports it, and
	// no violation of the answer.
	invalid
	// refused: sheba refuses the request by a field's rules, which the
	// document says as far as the protos' buf.validate rules do: Prism
	// may report the request, and no violation of the answer.
	refused
)

// prismViolation is one entry of Prism's sl-violations header.
type prismViolation struct {
	Location []string `json:"location"`
	Severity string   `json:"severity"`
	Code     any      `json:"code"`
	Message  string   `json:"message"`
}

// startPrism runs Prism's proxy on 127.0.0.1 with doc in front of
// upstream, and returns its URL and its output. It is stopped when the
// test ends.
func startPrism(t *testing.T, doc, upstream string) (string, *shebaproc.Buffer) {
	t.Helper()
	if _, err := os.Stat(prismBin); err != nil {
		t.Fatalf("Stoplight Prism is not installed (%v): run make test, whose npm ci in tools/ts installs it", err)
	}
	path := filepath.Join(t.TempDir(), "sheba.openapi.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// --errors=false: every request goes through, and what breaks the
	// document is reported in the sl-violations header of its answer.
	cmd := exec.CommandContext(ctx, prismBin, "proxy", path, upstream,
		"--host", "127.0.0.1", "--port", "0", "--cors=false", "--errors=false")
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out := &shebaproc.Buffer{}
	cmd.Stderr = out
	// Its output is read line by line until it ends (the pipe is closed
	// once Prism has exited), for the line that says its port.
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prism: %v", err)
	}
	listening := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Prism is listening on (http://127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(out, sc.Text())
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case listening <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(out, pr) // past a line too long to scan
	}()
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		pw.Close()
	})
	select {
	case url := <-listening:
		return url, out
	case <-time.After(30 * time.Second):
		t.Fatalf("prism did not start in 30s:\n%s", out)
	}
	return "", nil
}

// TestPrismProxy sends the REST flow of a client through Stoplight Prism
// proxying to sheba, with the OpenAPI 3.1 document that sheba serves: what
// a request may be and what each answer is. Prism finds no violation in
// any answer, errors included, and none in the requests but the ones meant
// to break the document (a wrong type, no API key, values out of a
// field's rules), which sheba refuses as the document says. Build tag prism: make test runs it, after its npm
// ci has installed Prism (docs/api.md#openapi).
func TestPrismProxy(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, allowPrivate)
	url, out := startPrism(t, openapiv3.Document, e.baseURL)
	client := resttest.Client{BaseURL: url, Header: http.Header{"X-Api-Key": {testKey}}}

	// call sends a request through Prism and checks its code and the
	// violations Prism reports, as want says.
	call := func(name string, want requestKind, wantCode int, method, path, body string, header ...string) resttest.Response {
		t.Helper()
		r := client.Do(t, method, path, body, header...)
		if r.Code != wantCode {
			t.Errorf("%s: %s %s: got %d %s, want %d", name, method, path, r.Code, r.Body, wantCode)
		}
		var vs []prismViolation
		if h := r.Header.Get("sl-violations"); h != "" {
			if err := json.Unmarshal([]byte(h), &vs); err != nil {
				t.Fatalf("%s: sl-violations %q: %v", name, h, err)
			}
		}
		requestOnly := true
		for _, v := range vs {
			requestOnly = requestOnly && len(v.Location) > 0 && v.Location[0] == "request"
		}
		switch {
		case want == valid && len(vs) > 0:
			t.Errorf("%s: %s %s: Prism reports violations of the document: %+v", name, method, path, vs)
		case want == invalid && len(vs) == 0:
			t.Errorf("%s: %s %s: Prism reports no violation, want the request's", name, method, path)
		case !requestOnly:
			t.Errorf("%s: %s %s: Prism reports %+v, want violations of the request alone", name, method, path, vs)
		}
		return r
	}
	// A document field's value as a string.
	field := func(r resttest.Response, name string) string {
		t.Helper()
		s, _ := r.JSON(t)[name].(string)
		if s == "" {
			t.Fatalf("no %q in %s", name, r.Body)
		}
		return s
	}

	call("ping, no key (public)", valid, 200, http.MethodGet, "/v1/ping", "", "X-Api-Key", "")
	r := call("create account", valid, 200, http.MethodPost, "/v1/accounts",
		`{"username":"prism.user","password":"correct horse"}`, "Idempotency-Key", "prism-1")
	account := field(r, "id")
	call("create account, replayed", valid, 200, http.MethodPost, "/v1/accounts",
		`{"username":"prism.user","password":"correct horse"}`, "Idempotency-Key", "prism-1")
	call("create account, key reused", valid, 422, http.MethodPost, "/v1/accounts",
		`{"username":"prism.other","password":"correct horse"}`, "Idempotency-Key", "prism-1")
	call("username taken", valid, 409, http.MethodPost, "/v1/accounts", `{"username":"prism.user","password":"correct horse"}`)
	call("login", valid, 200, http.MethodPost, "/v1/accounts:login", `{"username":"prism.user","password":"correct horse"}`)
	call("login, wrong password", valid, 401, http.MethodPost, "/v1/accounts:login", `{"username":"prism.user","password":"wrong horse"}`)
	call("get account", valid, 200, http.MethodGet, "/v1/accounts/"+account, "")
	call("get account, as a bearer", valid, 200, http.MethodGet, "/v1/accounts/"+account, "", "X-Api-Key", "", "Authorization", "Bearer "+testKey)
	call("get account, none", valid, 404, http.MethodGet, "/v1/accounts/"+unknownID, "")

	call("create subscription", valid, 200, http.MethodPost, "/v1/accounts/"+account+"/subscription", `{"plan":"pro"}`, "Idempotency-Key", `"prism-2"`)
	call("get subscription", valid, 200, http.MethodGet, "/v1/accounts/"+account+"/subscription", "")
	call("cancel subscription", valid, 200, http.MethodPost, "/v1/accounts/"+account+"/subscription:cancel", "", "Idempotency-Key", "prism-3")
	call("cancel subscription, none", valid, 404, http.MethodPost, "/v1/accounts/"+account+"/subscription:cancel", "{}")
	call("list subscriptions", valid, 200, http.MethodGet, "/v1/subscriptions?pageSize=10&plan=pro", "")

	r = call("create webhook endpoint", valid, 200, http.MethodPost, "/v1/webhookEndpoints",
		`{"url":"http://127.0.0.1:1/hook","eventTypes":["subscription.created","account.created"],"description":"prism"}`)
	endpoint := field(r, "id")
	call("get webhook endpoint", valid, 200, http.MethodGet, "/v1/webhookEndpoints/"+endpoint, "")
	call("list webhook endpoints", valid, 200, http.MethodGet, "/v1/webhookEndpoints?pageSize=5", "")
	call("list deliveries", valid, 200, http.MethodGet, "/v1/webhookEndpoints/"+endpoint+"/deliveries", "")
	call("delete webhook endpoint", valid, 200, http.MethodDelete, "/v1/webhookEndpoints/"+endpoint, "")

	call("wrong type", invalid, 400, http.MethodPost, "/v1/accounts", `{"username":5,"password":"correct horse"}`)
	call("username out of its rules", refused, 400, http.MethodPost, "/v1/accounts", `{"username":"X","password":"correct horse"}`)
	call("id not a UUID", refused, 400, http.MethodGet, "/v1/accounts/not-a-uuid", "")
	call("unknown event type", refused, 400, http.MethodPost, "/v1/webhookEndpoints", `{"url":"http://127.0.0.1:1/h","eventTypes":["nope"]}`)
	call("page size below 0", refused, 400, http.MethodGet, "/v1/subscriptions?pageSize=-1", "")
	call("no key", invalid, 401, http.MethodGet, "/v1/accounts/"+account, "", "X-Api-Key", "")

	// What Prism logs of the answers: no violation of the document.
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, "Violation: response") {
			t.Errorf("Prism: %s", strings.TrimSpace(line))
		}
	}
	if t.Failed() {
		t.Logf("Prism's output:\n%s", out)
	}
}
