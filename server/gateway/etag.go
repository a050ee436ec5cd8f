package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/codec/httpcompress"
	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/internal/etag"
)

// ETags (docs/api.md#etags). A REST call's If-Match header reaches the
// handler as its if-match metadata (channelHeaders), where every transport
// puts it: the handler makes the call's condition of it and the store
// checks it in the change's transaction, so If-Match means the same on
// REST, gRPC and Connect. What is REST's alone is done here: the ETag
// header of an answer that carries a resource with an etag, and the 412 of
// a mismatch under If-Match (errorHandler, by the error table).

// ifMatchHeader is the header of a REST call's If-Match condition.
var ifMatchHeader = http.CanonicalHeaderKey(etag.MetadataKey)

// hasIfMatch reports whether r carries an If-Match condition: its
// ETAG_MISMATCH is 412 Precondition Failed, as RFC 9110 §13.1.1 says,
// rather than the 409 of its code.
func hasIfMatch(r *http.Request) bool {
	return etag.NewCondition("", r.Header[ifMatchHeader]).HasIfMatch()
}

// ifMatchValues returns the If-Match header lines vs as metadata can carry
// them. metadataValues would leave out a line that is not printable ASCII,
// and with it the condition: a change under If-Match: "é" would be made
// unconditionally. Here such a line is kept, each byte that metadata cannot
// carry replaced by one that reads alike in If-Match (a tab by a space,
// which are both whitespace there; any other by '?', which, as the byte it
// replaces, belongs in an entity tag but in none of sheba's etags), so the
// condition matches what it matched: nothing more.
func ifMatchValues(vs []string) []string {
	if !slices.ContainsFunc(vs, func(v string) bool { return !callinfo.MetadataText(v) }) {
		return slices.Clip(vs)
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strings.Map(func(r rune) rune {
			switch {
			case r == '\t':
				return ' '
			case r < ' ' || r > '~':
				return '?'
			}
			return r
		}, v)
	}
	return out
}

// etagged is a message with an etag: a resource of AIP-154.
type etagged interface {
	GetEtag() string
}

// responseBody is the wrapper of a response whose REST answer is one of
// its fields (response_body in the HTTP rule), as grpc-gateway writes it.
type responseBody interface {
	XXX_ResponseBody() any
}

// writeETag is the forward-response option that writes the ETag header of
// an answer whose body is a resource with an etag (a Subscription): the
// etag, quoted as a strong entity tag. The header is the body's, so a
// replayed answer (whose body is the recorded one) repeats it. The answer
// goes uncompressed: a strong tag names the bytes sent, which a content
// coding would change (RFC 9110 §8.8.3); such answers are a few hundred
// bytes, under compression.min_bytes unless it is set lower.
func writeETag(_ context.Context, w http.ResponseWriter, resp proto.Message) error {
	var body any = resp
	if rb, ok := resp.(responseBody); ok {
		body = rb.XXX_ResponseBody()
	}
	r, ok := body.(etagged)
	if !ok || r.GetEtag() == "" {
		return nil
	}
	h := w.Header()
	h.Set("ETag", etag.Quote(r.GetEtag()))
	h.Set(httpcompress.NoCompression, "1")
	return nil
}
