package hook

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// h1HeadInputs are answer heads at the edges of h1ParseHead's.
var h1HeadInputs = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n" + httpTestContinue,
	"HTTP/1.1 200 OK\r\nContent-Length: 22\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nbusy\n",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 22\r\n\r\n",
	"HTTP/1.1 200 OK\r\nconnection:  keep-alive , CLOSE\t\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nConnection: clo\u017fe\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\ncontent-length:\t007 \r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nab\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\nto the end",
	"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\nab",
	"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\n X-Lead: a\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nX-Obs: caf\xe9\x7f\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nX-CR: a\rb\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\n: empty name\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1  200 OK\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 999 \x00\r\nContent-Length: 2\r\n\r\nab",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
	"",
}

func TestH1ParseHead(t *testing.T) {
	for _, in := range h1HeadInputs {
		checkH1ParseHead(t, []byte(in))
	}
	// The common answer is parsed in place, not left to net/http.
	if _, ok := h1ParseHead([]byte(h1HeadInputs[0])); !ok {
		t.Errorf("h1ParseHead(%q) left to net/http", h1HeadInputs[0])
	}
}

// checkH1ParseHead fails when h1ParseHead takes b and http.ReadResponse
// reads it otherwise: an error, or another status, body length, body start
// or keep-alive decision.
func checkH1ParseHead(t *testing.T, b []byte) {
	t.Helper()
	got, ok := h1ParseHead(b)
	if !ok {
		return
	}
	// One buffer holds the whole input: the part read is what the head
	// took.
	br := bufio.NewReaderSize(bytes.NewReader(b), len(b)+16)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%q: h1ParseHead took %+v; http.ReadResponse: %v", b, got, err)
	}
	want := h1Head{
		size:          len(b) - br.Buffered(),
		status:        resp.StatusCode,
		contentLength: resp.ContentLength,
		close:         resp.Close,
	}
	if got != want || len(resp.TransferEncoding) > 0 {
		t.Errorf("%q: h1ParseHead = %+v, http.ReadResponse reads %+v (Transfer-Encoding %q)", b, got, want, resp.TransferEncoding)
	}
}

func FuzzH1ParseHead(f *testing.F) {
	for _, in := range h1HeadInputs {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkH1ParseHead(t, b) })
}
