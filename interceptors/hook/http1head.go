package hook

import "golang.org/x/net/http/httpguts"

// h1Head is what the client needs of an answer's head: where it ends, its
// status, its body's length and whether its connection may be kept.
type h1Head struct {
	// size is the head's length in bytes, status line and blank line
	// included: the body begins there.
	size          int
	status        int
	contentLength int64
	close         bool
}

// h1ParseHead parses the head of the common answer, whole in b: HTTP/1.1,
// a final status other than 204 and 304, a Content-Length, no
// Transfer-Encoding, lines ending in CRLF and no folded line. ok is false
// for any other input, valid or not: the caller then reads it with
// http.ReadResponse, which handles the rest of HTTP/1.x. What it takes,
// it reads as http.ReadResponse does (FuzzH1ParseHead compares them).
//
// It is written by hand because http.ReadResponse builds a Response, its
// header map and a string per header line for each answer, which cost the
// hook's client a fifth of its CPU; no well-kept library parses an HTTP/1.1
// answer head in place without them (valyala/fasthttp's parser is tied to
// its own client and types).
func h1ParseHead(b []byte) (h h1Head, ok bool) {
	const proto = "HTTP/1.1 "
	if len(b) < len(proto)+3 || string(b[:len(proto)]) != proto {
		return h1Head{}, false
	}
	for _, c := range b[len(proto) : len(proto)+3] {
		if c < '0' || c > '9' {
			return h1Head{}, false
		}
		h.status = h.status*10 + int(c-'0')
	}
	// 1xx are interim, and 204 and 304 have no body whatever their
	// Content-Length says.
	if h.status < 200 || h.status == 204 || h.status == 304 {
		return h1Head{}, false
	}
	line, rest, ok := h1Line(b[len(proto)+3:])
	if !ok || len(line) > 0 && line[0] != ' ' {
		return h1Head{}, false
	}
	seenLength := false
	for {
		line, rest, ok = h1Line(rest)
		if !ok {
			return h1Head{}, false
		}
		if len(line) == 0 {
			break
		}
		// A line that begins with white space continues the one before
		// (or, first, is malformed): left to net/http.
		if len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
			return h1Head{}, false
		}
		i := 0
		for i < len(line) && line[i] != ':' {
			if !httpguts.IsTokenRune(rune(line[i])) {
				return h1Head{}, false
			}
			i++
		}
		if i == 0 || i == len(line) {
			return h1Head{}, false
		}
		name, value := line[:i], h1TrimOWS(line[i+1:])
		for _, c := range value {
			if !h1ValueByte(c) {
				return h1Head{}, false
			}
		}
		switch {
		case h1EqualFold(name, "content-length"):
			if seenLength || len(value) == 0 || len(value) > 18 {
				return h1Head{}, false
			}
			seenLength = true
			for _, c := range value {
				if c < '0' || c > '9' {
					return h1Head{}, false
				}
				h.contentLength = h.contentLength*10 + int64(c-'0')
			}
		case h1EqualFold(name, "transfer-encoding"):
			return h1Head{}, false
		case h1EqualFold(name, "connection"):
			h.close = h.close || h1HasToken(value, "close")
		}
	}
	if !seenLength {
		// The body runs to the connection's end.
		return h1Head{}, false
	}
	h.size = len(b) - len(rest)
	return h, true
}

// h1Line cuts the line that begins b, without its CRLF. ok is false when b
// holds no CRLF, or when the line holds a CR or LF of its own.
func h1Line(b []byte) (line, rest []byte, ok bool) {
	for i, c := range b {
		switch c {
		case '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				return b[:i], b[i+2:], true
			}
			return nil, nil, false
		case '\n':
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// h1ValueByte reports whether c may be in a header value: VCHAR, SP,
// HTAB and obs-text, as net/textproto takes them.
func h1ValueByte(c byte) bool {
	return c == '\t' || c >= 0x20 && c != 0x7f
}

// h1TrimOWS drops the spaces and tabs around b.
func h1TrimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// h1EqualFold reports whether b is lower, ignoring the case of ASCII
// letters only (as HTTP does: bytes.EqualFold would also fold "ſ" to "s").
func h1EqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// h1HasToken reports whether the comma-separated list v holds token, as
// httpguts.HeaderValuesContainsToken does.
func h1HasToken(v []byte, token string) bool {
	for {
		item := v
		comma := -1
		for i, c := range v {
			if c == ',' {
				comma = i
				break
			}
		}
		if comma >= 0 {
			item, v = v[:comma], v[comma+1:]
		}
		if h1EqualFold(h1TrimOWS(item), token) {
			return true
		}
		if comma < 0 {
			return false
		}
	}
}
