package gateway

import (
	"errors"
	"io"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// The body of a public method's call without a key (docs/api.md#authentication):
// anyone may send one, so it takes no body slot, which would let callers
// without a key hold the slots that keyed bodies need (each slot is held
// for as long as its client takes to send the body, up to
// http.read_timeout). It is bounded instead by publicBodyBytes, as sent
// and once decompressed, and read whole into memory before it is
// decompressed or decoded, so that a slow client holds its connection and
// at most that much memory, nothing shared. A keyed call to a public
// method is read as any keyed call is, in a slot, within
// http.max_body_bytes.

// publicBodyBytes bounds the body of a call to a public method without a
// valid key, as sent and once decompressed. Ping's request is empty (a
// few bytes of framing); 4 KiB holds any request of the API as its
// clients encode it (the largest, CreateWebhookEndpoint's, is about 2.4
// KiB at its field limits), should an operator make its method public
// (auth.public), and is little memory per connection.
const publicBodyBytes = 4 << 10

// errOverLimit is readAll's error for a body over its limit.
var errOverLimit = errors.New("request body over its limit")

// readAll reads r's body whole, at most limit bytes of it: errOverLimit
// when it is longer, as declared or as sent; the read's error when it
// cannot be read to its end (the client went away, or http.read_timeout
// cut it).
func readAll(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errOverLimit
	}
	var body []byte
	var err error
	switch {
	case r.ContentLength > 0:
		// Of the length declared, which net/http holds the body to.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	case r.ContentLength < 0:
		body, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	}
	switch {
	case int64(len(body)) > limit:
		return nil, errOverLimit
	case err != nil:
		return nil, err
	}
	return body, nil
}

// readPublicBody reads the body of a call to a public method without a
// valid key into memory, within publicBodyBytes and without a body slot,
// and makes that r's body; answered is true when it answered the request
// instead: 413 for a body over the bound (before a byte is read when its
// declared length says so), 400 for one that could not be read.
func readPublicBody(gw *runtime.ServeMux, w http.ResponseWriter, r *http.Request) (answered bool) {
	body, err := readAll(r, publicBodyBytes)
	switch {
	case errors.Is(err, errOverLimit):
		closeAfterAnswer(w, r)
		writeError(gw, w, r, errBodyTooLarge(publicBodyBytes))
		return true
	case err != nil:
		writeError(gw, w, r, malformed("the request body could not be read"))
		return true
	}
	setBody(r, body)
	return false
}

// setBody makes body, in memory, r's body.
func setBody(r *http.Request, body []byte) {
	mb := &memBody{}
	mb.Reset(body)
	r.Body, r.ContentLength = mb, int64(len(body))
}

// closeAfterAnswer has an HTTP/1 connection closed once the answer is
// sent, and the answer sent at once: net/http would otherwise first read
// what is left of a body the handler did not read to its end (up to
// 256 KiB of it, to keep the connection), waiting for a slow client as long
// as http.read_timeout allows. HTTP/2 has no such wait, and would take
// Connection: close for a GOAWAY to every stream of the connection.
func closeAfterAnswer(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
}
