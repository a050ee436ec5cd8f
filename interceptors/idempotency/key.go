package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// MetadataKey is the request metadata that carries the key; the REST
// gateway passes the Idempotency-Key header in it.
const MetadataKey = "idempotency-key"

// MaxKeyLen is the longest key accepted, in characters.
const MaxKeyLen = 255

var errKeySyntax = fmt.Errorf("must be 1 to %d visible ASCII characters, bare or as a quoted string", MaxKeyLen)

// errBadKeySyntax is the answer to a key that breaks errKeySyntax.
var errBadKeySyntax = badKey(errKeySyntax.Error())

// CheckHeader returns the answer to Idempotency-Key header values that
// cannot reach the interceptor, or nil. A value holding a byte outside
// space to tilde (a control character, a tab, any byte over 0x7E) cannot
// travel in gRPC metadata: the REST gateway drops it, and the interceptor
// would see no key and run the request unprotected. So the gateway refuses
// it, before auth, with the InvalidArgument answer the interceptor gives a
// malformed key, and its BadRequest field violation. Such a value is no
// key, but for tabs around one, which ParseKey trims (HTTP/1.1 strips them
// before the gateway sees the value): those are refused too, as there is
// no metadata to trim them in. The values the gateway passes on, the
// interceptor checks in full.
func CheckHeader(values []string) error {
	for _, v := range values {
		if !callinfo.MetadataText(v) {
			return errBadKeySyntax
		}
	}
	return nil
}

// ParseKey returns the key that the value v of an Idempotency-Key header
// holds: a quoted string in the syntax of RFC 8941 (the IETF draft's form,
// "abc", where \" and \\ stand for " and \) or a bare token (abc). The key
// itself is 1 to MaxKeyLen visible ASCII characters (! to ~) either way, so
// "abc" and abc are the same key. Spaces and tabs around v are ignored.
//
// The parser is ours rather than a structured-fields library's: the bare
// form accepts any visible ASCII, which RFC 8941 would read as an integer
// (123), a token or an error (1-2, {k}), and the quoted form is one small
// production of it.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		closed := false
		for i := 1; i < len(v); i++ {
			c := v[i]
			if c == '\\' {
				if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
					return "", errors.New(`may escape only " and \ with \`)
				}
				b.WriteByte(v[i+1])
				i++
				continue
			}
			if c == '"' {
				if i != len(v)-1 {
					return "", errors.New("must end at its closing quote")
				}
				closed = true
				break
			}
			b.WriteByte(c)
		}
		if !closed {
			return "", errors.New("has no closing quote")
		}
		v = b.String()
	}
	if len(v) == 0 || len(v) > MaxKeyLen {
		return "", errKeySyntax
	}
	for i := range len(v) {
		if v[i] < '!' || v[i] > '~' {
			return "", errKeySyntax
		}
	}
	return v, nil
}

// keyFromContext returns the key of the call, and whether it has one; a
// malformed key is an InvalidArgument error.
func keyFromContext(ctx context.Context) (string, bool, error) {
	values := metadata.ValueFromIncomingContext(ctx, MetadataKey)
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, badKey("must be given once")
	}
	key, err := ParseKey(values[0])
	if err != nil {
		return "", false, badKey(err.Error())
	}
	return key, true, nil
}

// badKey is the InvalidArgument answer to a malformed key, with a field
// violation of the header.
func badKey(description string) error {
	return reason.Error(codes.InvalidArgument, reason.InvalidArgument, "invalid "+MetadataKey+": "+description,
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: MetadataKey, Description: description}}})
}
