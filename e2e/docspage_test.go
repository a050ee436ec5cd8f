//go:build browser

// The API reference page's test in a real browser (docs/api.md#the-reference-page):
// run it with `make test-browser`, like the example page's.

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// TestDocsPage loads GET /docs from sheba on 127.0.0.1 in headless
// Chromium, driven over the DevTools protocol (chromedp), as a reader
// does: it opens each group of the page's menu, and each operation of the
// OpenAPI document the page renders, which must show that operation's
// method and path, and it sends Ping from the page ("Send API Request"),
// which must show sheba's pong. Every method of the method table is an
// operation of that document. Meanwhile it records every request the
// page makes, which must all go to sheba (nothing else resolves:
// Chromium's --host-resolver-rules, so a request for another host would
// also fail rather than leave), every Content-Security-Policy violation
// the page sees (securitypolicyviolation events, and the browser's log),
// which must be none, and uncaught exceptions, none either.
func TestDocsPage(t *testing.T) {
	chromium := chromiumPath(t)
	e := newTestEnv(t)
	start := time.Now()

	document, ops := docsOperations(t, e)
	var want []string
	for _, s := range shebav1.Services {
		for _, m := range s.Methods {
			if m.HTTP.Method != "" {
				want = append(want, m.HTTP.Method+" "+pathShape(m.HTTP.Path))
			}
		}
	}
	var got []string
	for _, op := range ops {
		got = append(got, op.Method+" "+pathShape(op.Path))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the page's document has operations %q, want the method table's routes %q", got, want)
	}

	// The browser. Its own background requests (updates, and the like)
	// are not the page's, and are not recorded: the page's are, by its
	// tab. They could not leave either.
	sheba, err := url.Parse(e.baseURL)
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		// Root (CI) cannot use Chromium's sandbox; the page is our own.
		chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE "+sheba.Hostname()),
	)
	// Bounds a browser that hangs.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ctx, cancel = chromedp.NewExecAllocator(ctx, opts...)
	defer cancel()
	var rec pageRecord
	ctx, cancel = chromedp.NewContext(ctx, chromedp.WithListener(rec.event))
	defer cancel()

	err = chromedp.Do(ctx,
		func(ctx context.Context, tab *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
				Source: `window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
	window.cspViolations.push(e.effectiveDirective + " blocked " + e.blockedURI + " at " + e.sourceFile + ":" + e.lineNumber);
});`,
			})
			return chromedp.Void{}, err
		},
		chromedp.Navigate(e.baseURL+"/docs"),
		chromedp.WaitVisible(chromedp.CSS(`a.ElementsTableOfContentsItem`)),
	)
	if err != nil {
		t.Fatalf("load /docs: %v\n%s", err, rec.String())
	}
	// The menu groups operations by tag, each group closed at first.
	var tags []string
	for _, op := range ops {
		if len(op.Tags) > 0 && !slices.Contains(tags, op.Tags[0]) {
			tags = append(tags, op.Tags[0])
		}
	}
	for _, tag := range tags {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`elements-api [title=%q]`, tag)), chromedp.NodeVisible)); err != nil {
			t.Fatalf("open the menu's group %s: %v", tag, err)
		}
	}
	for _, op := range ops {
		shown, err := showOperation(ctx, op)
		if err != nil {
			t.Errorf("operation %s %s (%s): %v", op.Method, op.Path, op.ID, err)
		} else if !shown {
			t.Errorf("operation %s %s (%s): its page does not show its method and path", op.Method, op.Path, op.ID)
		}
	}
	// The page's own calls: Ping's "Send API Request" gets sheba's pong.
	for _, op := range ops {
		if op.Method == http.MethodGet && op.Path == "/v1/ping" {
			if err := tryPing(ctx, op); err != nil {
				t.Errorf("send Ping from the page: %v", err)
			}
		}
	}
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.cspViolations`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Chromium went through the page and its %d operations in %s", len(ops), time.Since(start).Round(time.Millisecond))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	violations = append(violations, rec.cspLog...)
	if len(violations) > 0 {
		t.Errorf("Content-Security-Policy violations: %q", violations)
	}
	if len(rec.exceptions) > 0 {
		t.Errorf("uncaught exceptions: %q", rec.exceptions)
	}
	for _, r := range rec.requests {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "data" && u.Scheme != "blob" && u.Host != sheba.Host) {
			t.Errorf("the page requested %s, not from sheba at %s", r, sheba.Host)
		}
	}
	// The record holds what the page surely loaded: itself, its script
	// and its document.
	for _, suffix := range []string{"/docs", "/web-components.min.js", document} {
		if !slices.ContainsFunc(rec.requests, func(r string) bool { return strings.HasSuffix(r, suffix) }) {
			t.Errorf("no request for …%s recorded: %q", suffix, rec.requests)
		}
	}
	if t.Failed() {
		t.Logf("the page's log:\n%s", rec.logString())
	}
}

// showOperation clicks op's item in the page's menu, and reports whether
// the page then shows op's method and path, within 10 seconds.
func showOperation(ctx context.Context, op docsOperation) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	item := chromedp.CSS(fmt.Sprintf(`a.ElementsTableOfContentsItem[href=%q]`, "#/operations/"+op.ID))
	if err := chromedp.Do(ctx, chromedp.Click(item, chromedp.NodeVisible)); err != nil {
		return false, fmt.Errorf("click its menu item: %w", err)
	}
	// The operation's heading: a box titled with its path, whose first
	// part is its method.
	shown, err := chromedp.Run(ctx, chromedp.PollFunction[bool](`(path, method) => {
		for (const box of document.querySelectorAll(".HttpOperation [title]")) {
			if (box.getAttribute("title") === path && box.firstElementChild &&
				box.firstElementChild.textContent.trim().toUpperCase() === method) {
				return true;
			}
		}
		return false;
	}`, chromedp.WithPollingArgs(op.Path, op.Method), chromedp.WithPollingTimeout(0)))
	if ctx.Err() != nil {
		return false, nil
	}
	return shown, err
}

// tryPing opens Ping's operation, sends it with the page's "Send API
// Request", and waits 10 seconds at most for the answer, sheba's pong,
// to show.
func tryPing(ctx context.Context, ping docsOperation) error {
	if shown, err := showOperation(ctx, ping); err != nil || !shown {
		return fmt.Errorf("Ping's operation not shown (%v)", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	send := chromedp.Search(`//button[normalize-space(.)="Send API Request"]`)
	if err := chromedp.Do(ctx, chromedp.Click(send, chromedp.NodeVisible)); err != nil {
		return fmt.Errorf("click Send API Request: %w", err)
	}
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.body.innerText.includes('"message": "pong"')`, chromedp.WithPollingTimeout(0)))
	if err != nil {
		body, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.body.innerText`))
		return fmt.Errorf("no pong shown (%v):\n%s", err, body)
	}
	return nil
}

// docsOperation is an operation of the page's OpenAPI document.
type docsOperation struct {
	ID, Method, Path string
	Tags             []string
}

// docsOperations reads the page at /docs, without a key, for the document
// it renders, and returns that document's path and its operations.
func docsOperations(t *testing.T, e *testEnv) (string, []docsOperation) {
	t.Helper()
	r := e.do(t, http.MethodGet, "/docs", "", "X-Api-Key", "")
	wantCode(t, r, http.StatusOK)
	doc, err := html.Parse(strings.NewReader(string(r.Body)))
	if err != nil {
		t.Fatal(err)
	}
	var document string
	for n := range doc.Descendants() {
		if n.Type == html.ElementNode && n.Data == "elements-api" {
			document, _ = domAttr(n, "apidescriptionurl")
		}
	}
	ref, err := url.Parse(document)
	if document == "" || err != nil {
		t.Fatalf("the page names no document: %q", r.Body)
	}
	page, err := url.Parse(e.baseURL + "/docs")
	if err != nil {
		t.Fatal(err)
	}
	path := page.ResolveReference(ref).Path
	r = e.do(t, http.MethodGet, path, "", "X-Api-Key", "")
	wantCode(t, r, http.StatusOK)
	var openapi struct {
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(r.Body, &openapi); err != nil {
		t.Fatalf("the page's document %s: %v", document, err)
	}
	var ops []docsOperation
	for p, item := range openapi.Paths {
		for method, raw := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
			default:
				continue // parameters, summary, …
			}
			var op struct {
				OperationID string
				Tags        []string
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			ops = append(ops, docsOperation{ID: op.OperationID, Method: strings.ToUpper(method), Path: p, Tags: op.Tags})
		}
	}
	if len(ops) == 0 {
		t.Fatalf("the page's document %s has no operation", document)
	}
	slices.SortFunc(ops, func(a, b docsOperation) int { return strings.Compare(a.ID, b.ID) })
	return path, ops
}

// pathShape is a path template with its variables' names left out:
// /v1/accounts/{} for /v1/accounts/{account_id} and /v1/accounts/{accountId}.
func pathShape(p string) string {
	return regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(p, "{}")
}

// pageRecord is what the tab reports while the test runs: the URL of
// every request and WebSocket, the Content-Security-Policy violations in
// the browser's log, uncaught exceptions, and the whole log.
type pageRecord struct {
	mu         sync.Mutex
	requests   []string
	cspLog     []string
	exceptions []string
	log        []string
}

// event is the tab's listener: it runs in the tab's loop, so it only
// records.
func (rec *pageRecord) event(ev any) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		rec.requests = append(rec.requests, ev.Request.URL)
	case *network.EventWebSocketCreated:
		rec.requests = append(rec.requests, ev.URL)
	case *log.EventEntryAdded:
		rec.log = append(rec.log, fmt.Sprintf("%s %s: %s (%s)", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		if strings.Contains(ev.Entry.Text, "Content Security Policy") {
			rec.cspLog = append(rec.cspLog, ev.Entry.Text)
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		rec.exceptions = append(rec.exceptions, text)
		rec.log = append(rec.log, "exception: "+text)
	}
}

func (rec *pageRecord) logString() string {
	return strings.Join(rec.log, "\n")
}

func (rec *pageRecord) String() string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return "requests:\n" + strings.Join(rec.requests, "\n") + "\nlog:\n" + rec.logString()
}
