// Package etag holds sheba's entity tags (AIP-154; RFC 9110 §8.8.3): the
// name of a resource's version, and the condition a change is made under,
// from a request's etag field and its If-Match header (REST) or if-match
// metadata (gRPC, Connect). The store names versions and checks a change's
// condition in the change's transaction; the handlers make the condition of
// a call; the REST gateway passes If-Match on as metadata and writes the
// ETag header. It imports nothing of sheba.
//
// The If-Match syntax is read here rather than by a library: net/http reads
// it (checkIfMatch, scanETag) only for the files it serves, unexported, and
// no well-kept Go package offers it alone. This is the same reading, over
// every field line rather than the first alone.
package etag

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// MetadataKey is the gRPC metadata of a call's If-Match condition, in the
// syntax of the HTTP header (RFC 9110 §13.1.1): `"<etag>"`, a
// comma-separated list of them, or `*`. The REST gateway passes the If-Match
// header there.
const MetadataKey = "if-match"

// hashBytes is how much of the SHA-256 an etag keeps: 96 bits, 16
// characters of base64url without padding.
const hashBytes = 12

// Of returns the etag of the version of the resource id: the base64url (no
// padding, no quotes) of the first 96 bits of the SHA-256 of the id and the
// version. The hash makes it opaque: a client can neither compute the etag
// of another version nor tell how many changes a resource had; and the id in
// it tells the resources apart, so that the etag of a canceled subscription
// never matches the next subscription of its account, whose version starts
// at 1 again. It is no secret (an etag grants nothing: it names what a
// client saw), so it needs no key.
func Of(id string, version int64) string {
	b := make([]byte, 0, 64)
	b = append(b, id...)
	b = append(b, 0)
	b = strconv.AppendInt(b, version, 10)
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:hashBytes])
}

// Quote returns etag as the value of an ETag header: a strong entity tag,
// in double quotes.
func Quote(etag string) string {
	return `"` + etag + `"`
}

// Condition is what a change asks of the current etag of the resource it
// changes. The zero Condition asks nothing.
type Condition struct {
	// field is the request's etag field, "" when unset.
	field string
	// ifMatch are the If-Match field values, nil when there are none.
	ifMatch []string
}

// NewCondition returns the condition of a request whose etag field is
// field ("" when unset) and whose If-Match header lines, or if-match
// metadata values, are ifMatch. Empty values are no condition, as net/http
// takes an empty If-Match.
func NewCondition(field string, ifMatch []string) Condition {
	c := Condition{field: field}
	for _, v := range ifMatch {
		if strings.TrimSpace(v) != "" {
			c.ifMatch = ifMatch
			break
		}
	}
	return c
}

// IsZero reports whether c asks nothing.
func (c Condition) IsZero() bool {
	return c.field == "" && c.ifMatch == nil
}

// HasIfMatch reports whether c has an If-Match part: on REST, a change
// refused under it is 412 Precondition Failed rather than 409.
func (c Condition) HasIfMatch() bool {
	return c.ifMatch != nil
}

// Match reports whether a resource whose etag is current meets c: the etag
// field, if set, is current; and the If-Match values, if any, name it (a
// strong `"<current>"` among them) or are `*`, which any existing resource
// meets. A weak tag (W/"…") never matches: sheba's etags are strong, and
// If-Match compares strongly (RFC 9110 §13.1.1). A value that does not
// parse matches nothing past the point where it stops parsing, as net/http
// reads If-Match.
func (c Condition) Match(current string) bool {
	if c.field != "" && c.field != current {
		return false
	}
	if c.ifMatch == nil {
		return true
	}
	for _, v := range c.ifMatch {
		if listMatches(v, current) {
			return true
		}
	}
	return false
}

// listMatches reports whether the If-Match field value v names current or
// is `*` (net/http's checkIfMatch, over one line).
func listMatches(v, current string) bool {
	for {
		v = strings.TrimLeft(v, " \t")
		switch {
		case v == "":
			return false
		case v[0] == ',':
			v = v[1:]
			continue
		case v[0] == '*':
			return true
		}
		tag, rest, ok := scanTag(v)
		if !ok {
			return false
		}
		if !strings.HasPrefix(tag, "W/") && tag[1:len(tag)-1] == current {
			return true
		}
		v = rest
	}
}

// scanTag returns the entity tag at the start of s (W/"…" or "…", quotes
// included) and what follows it; ok is false when s does not start with
// one (net/http's scanETag).
func scanTag(s string) (tag, rest string, ok bool) {
	start := 0
	if strings.HasPrefix(s, "W/") {
		start = 2
	}
	if len(s[start:]) < 2 || s[start] != '"' {
		return "", "", false
	}
	for i := start + 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0x21 || c >= 0x23 && c <= 0x7e || c >= 0x80:
			// etagc (RFC 9110 §8.8.3)
		case c == '"':
			return s[:i+1], s[i+1:], true
		default:
			return "", "", false
		}
	}
	return "", "", false
}
