package gateway_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/shebasvc/sheba/e2e/resttest"
	"github.com/shebasvc/sheba/gen/docs"
	"github.com/shebasvc/sheba/server/gateway"
)

// docsCSP is the Content-Security-Policy every answer under /docs carries.
const docsCSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'"

// TestDocsPage loads GET /docs as a browser does, without a key: the
// page, then every file it names (resolved against the page's URL), each
// with its type, its headers and the bytes gen/docs embeds, and the
// OpenAPI document it renders. The browser test (e2e/docspage_test.go)
// shows what a browser makes of them.
func TestDocsPage(t *testing.T) {
	t.Parallel()
	rest := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "rest", http.StatusTeapot)
	})
	srv := httptest.NewServer(gateway.Handler(rest, gateway.Operator{Elsewhere: true}))
	t.Cleanup(srv.Close)
	c := resttest.Client{BaseURL: srv.URL, HTTP: srv.Client()}

	page := c.Do(t, http.MethodGet, "/docs", "")
	if page.Code != http.StatusOK {
		t.Fatalf("GET /docs: got %d, want 200", page.Code)
	}
	wantHeaders(t, "GET /docs", page.Header, map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Content-Security-Policy": docsCSP,
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "no-cache",
	})
	etag := page.Header.Get("ETag")
	if etag == "" {
		t.Error("GET /docs: no ETag")
	}

	// What the page loads: one script and one stylesheet, each a file of
	// gen/docs, and nothing inline (the policy allows no inline script).
	doc, err := html.Parse(strings.NewReader(string(page.Body)))
	if err != nil {
		t.Fatal(err)
	}
	var scripts, styles []string
	var document string
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		switch n.Data {
		case "script":
			src := attr(n, "src")
			if src == "" {
				t.Errorf("the page has an inline script: %q", n.FirstChild.Data)
			}
			scripts = append(scripts, src)
		case "link":
			if attr(n, "rel") == "stylesheet" {
				styles = append(styles, attr(n, "href"))
			}
		case "style":
			t.Error("the page has an inline <style>")
		case "elements-api":
			document = attr(n, "apidescriptionurl")
		}
	}
	if len(scripts) != 1 || len(styles) != 1 {
		t.Fatalf("the page loads scripts %q and styles %q, want one of each", scripts, styles)
	}
	for _, f := range []struct{ ref, name, contentType string }{
		{scripts[0], "web-components.min.js", "text/javascript; charset=utf-8"},
		{styles[0], "styles.min.css", "text/css; charset=utf-8"},
	} {
		if path.Base(f.ref) != f.name {
			t.Errorf("the page loads %q, want gen/docs's %s", f.ref, f.name)
		}
		wantAsset(t, f.ref, c.Do(t, http.MethodGet, resolve(t, f.ref), ""), f.name, f.contentType)
	}

	// The licenses are served beside the files they are for.
	for _, name := range []string{"LICENSE", "web-components.min.js.LICENSE.txt"} {
		ref := path.Join(path.Dir(scripts[0]), name)
		wantAsset(t, ref, c.Do(t, http.MethodGet, resolve(t, ref), ""), name, "text/plain; charset=utf-8")
	}

	// The document the page renders is an OpenAPI document sheba serves.
	if document == "" {
		t.Fatal("the page names no document (<elements-api apiDescriptionUrl>)")
	}
	r := c.Do(t, http.MethodGet, resolve(t, document), "")
	var openapi struct {
		Swagger, OpenAPI string
		Paths            map[string]any
	}
	if r.Code != http.StatusOK || json.Unmarshal(r.Body, &openapi) != nil ||
		openapi.Swagger+openapi.OpenAPI == "" || len(openapi.Paths) == 0 {
		t.Errorf("the page's document %q: got %d %.100q, want an OpenAPI document", document, r.Code, r.Body)
	}

	// Revalidation, HEAD, and what is not there.
	if r := c.Do(t, http.MethodGet, "/docs", "", "If-None-Match", etag); r.Code != http.StatusNotModified {
		t.Errorf("GET /docs with If-None-Match %s: got %d, want 304", etag, r.Code)
	}
	if r := c.Do(t, http.MethodHead, "/docs", ""); r.Code != http.StatusOK || len(r.Body) != 0 ||
		r.Header.Get("Content-Security-Policy") != docsCSP {
		t.Errorf("HEAD /docs: got %d %q, CSP %q; want 200, no body, the page's CSP", r.Code, r.Body, r.Header.Get("Content-Security-Policy"))
	}
	// Other methods go to rest, as they do for /openapi.json.
	if r := c.Do(t, http.MethodPost, "/docs", ""); r.Code != http.StatusTeapot {
		t.Errorf("POST /docs: got %d, want rest's 418", r.Code)
	}
	if r := c.Do(t, http.MethodGet, resolve(t, path.Join(path.Dir(scripts[0]), "nope.js")), ""); r.Code != http.StatusNotFound {
		t.Errorf("GET a file the page does not have: got %d, want 404", r.Code)
	}
}

// wantAsset checks the answer r to ref, a file of the page: 200, the
// headers of /docs, cached for good, and the bytes of gen/docs's name.
func wantAsset(t *testing.T, ref string, r response, name, contentType string) {
	t.Helper()
	if r.Code != http.StatusOK {
		t.Errorf("GET %s: got %d, want 200", ref, r.Code)
		return
	}
	wantHeaders(t, "GET "+ref, r.Header, map[string]string{
		"Content-Type":            contentType,
		"Content-Security-Policy": docsCSP,
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "public, max-age=31536000, immutable",
	})
	want, err := fs.ReadFile(docs.Elements, "elements/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Body, want) {
		t.Errorf("GET %s: got %d bytes, want the %d of gen/docs/elements/%s", ref, len(r.Body), len(want), name)
	}
}

func wantHeaders(t *testing.T, what string, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s %q, want %q", what, k, got, v)
		}
	}
}

// resolve resolves ref, a URL on the page, against the page's URL, and
// returns its path.
func resolve(t *testing.T, ref string) string {
	t.Helper()
	r, err := url.Parse(ref)
	if err != nil {
		t.Fatal(err)
	}
	return (&url.URL{Path: "/docs"}).ResolveReference(r).RequestURI()
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}
