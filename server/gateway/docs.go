package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/shebasvc/sheba/gen/docs"
)

// The API reference page (docs/api.md#the-reference-page): GET /docs is a
// page on which Stoplight Elements renders the OpenAPI document, with its
// script and styles, embedded in gen/docs (scripts/docsassets.sh says why
// Elements), under /docs/elements-VERSION/. Every URL of the page is
// relative to /docs, so the page works under any prefix a proxy adds.

// docsDocument is the OpenAPI document the page renders, relative to /docs.
const docsDocument = "openapi.v3.json"

// docsAssets is where the page's files are, relative to /docs: a path
// of their own for each version of Elements, so that they can be cached
// for good.
const docsAssets = "docs/elements-" + docs.ElementsVersion + "/"

// docsPage is the page: Elements' custom element, told where the document
// is. router="hash" keeps its navigation within the page (#/operations/…),
// so /docs is the only page there is.
const docsPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sheba API reference</title>
<link rel="stylesheet" href="` + docsAssets + `styles.min.css">
<script src="` + docsAssets + `web-components.min.js"></script>
</head>
<body>
<elements-api apiDescriptionUrl="` + docsDocument + `" router="hash" layout="sidebar"></elements-api>
</body>
</html>
`

// docsCSP is the Content-Security-Policy of /docs: everything from sheba
// itself, and styles inline too, as Elements sets style attributes and
// adds <style> elements as it renders (its styles.min.css is not all of
// them). Scripts need nothing more: the page has none inline, and Elements
// neither evaluates strings nor starts workers. base-uri and
// frame-ancestors are not covered by default-src: no <base> can move the
// page's relative URLs, and no other site can frame the page.
const docsCSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'"

// handleDocs serves the page and its files on mux, to GET and HEAD. The
// page is revalidated on each load (it names the document and the
// version of Elements, which a new sheba may change); the files are
// cached for good under their version's path.
func handleDocs(mux *http.ServeMux) {
	sum := sha256.Sum256([]byte(docsPage))
	pageETag := `"` + base64.RawURLEncoding.EncodeToString(sum[:16]) + `"`
	mux.HandleFunc("GET /docs", func(w http.ResponseWriter, r *http.Request) {
		docsHeaders(w, "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", pageETag)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(docsPage))
	})
	mux.HandleFunc("GET /"+docsAssets+"{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		f, err := docs.Elements.Open(path.Join("elements", name))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		// An embedded file seeks (so ServeContent answers ranges too);
		// a directory does not.
		content, ok := f.(io.ReadSeeker)
		if !ok {
			http.NotFound(w, r)
			return
		}
		docsHeaders(w, docsType(name))
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		http.ServeContent(w, r, "", time.Time{}, content)
	})
}

// docsHeaders sets the headers every answer under /docs carries.
func docsHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", docsCSP)
	h.Set("X-Content-Type-Options", "nosniff")
}

// docsType is the Content-Type of a file of the page, by its name: the
// script, the styles, and the licenses (plain text).
func docsType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	default:
		return "text/plain; charset=utf-8"
	}
}
