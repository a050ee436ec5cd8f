//go:build browser

// The example page's test in a real browser (docs/browser.md): run it with
// `make test-browser`, which builds the page into bin/browser and installs
// Debian's chromium when it is missing; make test leaves it out (the
// browser build tag), so a newcomer's machine needs no browser.

package e2e

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/html"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// pageDir is where make example-browser-build puts the page: index.html
// and the bundle of examples/browser/main.ts.
const pageDir = "../bin/browser"

// TestBrowserPage loads the example page from an origin of its own, which
// sheba allows in http.cors.allowed_origins, with the key and sheba's
// address in its query, for each protocol the page offers: it shows the
// pong and the one subscription sheba has, cell by cell as
// ListSubscriptions returned it. With a wrong key it shows sheba's Unauthenticated (the answer
// across origins is readable), and the pong of the public Ping before it.
func TestBrowserPage(t *testing.T) {
	chromium := chromiumPath(t)
	page := servePage(t)
	e := newTestEnv(t, func(c *config.Config) { c.HTTP.CORS.AllowedOrigins = []string{page} })

	acct, err := e.account.CreateAccount(t.Context(), &shebav1.CreateAccountRequest{Username: "browser", Password: "correct horse"})
	if err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	created, err := e.sub.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: acct.GetAccount().GetId(), Plan: "browser-pro"})
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	sub := created.GetSubscription()
	wantRows := [][]string{{
		sub.GetId(), acct.GetAccount().GetId(), "browser-pro", "ACTIVE",
		sub.GetCreateTime().AsTime().Round(time.Millisecond).UTC().Format("2006-01-02T15:04:05.000Z"),
	}}

	for _, protocol := range []string{"connect", "connect-proto", "grpc-web"} {
		t.Run(protocol, func(t *testing.T) {
			got := loadPage(t, chromium, page, e.baseURL, testKey, protocol)
			want := shown{State: "done", Text: "1 subscription", Pong: "pong", Rows: wantRows}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("page with the key (-want +got):\n%s", diff)
			}
			got = loadPage(t, chromium, page, e.baseURL, "not-a-key", protocol)
			want = shown{State: "failed", Text: "Failed: Unauthenticated: invalid API key", Pong: "pong"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("page with a wrong key (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBrowserPageOriginRefused loads the page from an origin that sheba
// does not allow (it allows another one): the browser refuses the answer,
// so the page shows the failure and no pong, while a caller that is no
// browser still gets its pong from the same sheba.
func TestBrowserPageOriginRefused(t *testing.T) {
	chromium := chromiumPath(t)
	page := servePage(t)
	e := newTestEnv(t, func(c *config.Config) { c.HTTP.CORS.AllowedOrigins = []string{"http://sheba-console.example"} })
	if _, err := e.ping.Ping(t.Context(), &shebav1.PingRequest{}); err != nil {
		t.Fatalf("Ping over gRPC: %v", err)
	}
	for _, protocol := range []string{"connect", "grpc-web"} {
		t.Run(protocol, func(t *testing.T) {
			got := loadPage(t, chromium, page, e.baseURL, testKey, protocol)
			// All that fetch tells a page of a refused answer.
			want := shown{State: "failed", Text: "Failed: Unknown: Failed to fetch"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("page (-want +got):\n%s", diff)
			}
		})
	}
}

// chromiumPath finds Debian's chromium, which make test-browser installs.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not found: make test-browser installs it (Debian: apt-get install chromium)")
	}
	return path
}

// servePage serves the built page on a port of its own, an origin other
// than sheba's, and returns that origin.
func servePage(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"index.html", "main.js"} {
		if _, err := os.Stat(filepath.Join(pageDir, name)); err != nil {
			t.Fatalf("the page is not built (%v): make test-browser builds it (make example-browser-build)", err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(pageDir)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return "http://" + lis.Addr().String()
}

// shown is what the page shows a user once its calls have ended.
type shown struct {
	State string // #state's data-state: done or failed
	Text  string // #state's text
	Pong  string
	Rows  [][]string // the cells of the subscriptions table, when it is shown
}

// loadPage opens the page in headless Chromium with the calls' settings
// in its query and returns what it shows once they have ended. Chromium
// dumps the page after the virtual-time budget, and virtual time stands
// still while a fetch is pending, so the dump comes after the calls'
// answers however long sheba takes; the context bounds a browser that
// hangs.
func loadPage(t *testing.T, chromium, page, server, key, protocol string) shown {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	addr := page + "/?" + url.Values{"server": {server}, "key": {key}, "protocol": {protocol}}.Encode()
	cmd := exec.CommandContext(ctx, chromium, chromiumArgs(t, addr)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", addr, err, stderr.String())
	}
	doc, err := html.Parse(strings.NewReader(string(out)))
	if err != nil {
		t.Fatalf("parse the page chromium dumped: %v\n%s", err, out)
	}
	var got shown
	state := domByID(doc, "state")
	if state == nil {
		t.Fatalf("the page has no #state:\n%s", out)
	}
	got.State, _ = domAttr(state, "data-state")
	got.Text = domText(state)
	if p := domByID(doc, "pong"); p != nil {
		got.Pong = domText(p)
	}
	if table := domByID(doc, "subscriptions"); table != nil && !isHidden(table) {
		for tr := range table.Descendants() {
			if tr.Type != html.ElementNode || tr.Data != "tr" || tr.Parent.Data != "tbody" {
				continue
			}
			var cells []string
			for td := range tr.ChildNodes() {
				if td.Type == html.ElementNode && td.Data == "td" {
					cells = append(cells, domText(td))
				}
			}
			got.Rows = append(got.Rows, cells)
		}
	}
	if got.State != "done" && got.State != "failed" {
		t.Logf("chromium's log:\n%s", stderr.String())
	}
	return got
}

// chromiumArgs are the arguments of a headless Chromium that loads addr
// and dumps its DOM after 5 s of virtual time.
func chromiumArgs(t *testing.T, addr string) []string {
	return []string{"--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
		// Root (CI) cannot use Chromium's sandbox; the page is our own.
		"--no-sandbox",
		"--user-data-dir=" + t.TempDir(),
		"--virtual-time-budget=5000",
		"--dump-dom", addr}
}

// The dumped page's elements, by id, and their attributes and text.

func domByID(n *html.Node, id string) *html.Node {
	for d := range n.Descendants() {
		if v, _ := domAttr(d, "id"); d.Type == html.ElementNode && v == id {
			return d
		}
	}
	return nil
}

func domAttr(n *html.Node, name string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

func isHidden(n *html.Node) bool {
	_, hidden := domAttr(n, "hidden")
	return hidden
}

func domText(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.TrimSpace(b.String())
}
