package requestlog

import (
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// JSONHandler is slog's JSONHandler with one addition: the request line of
// an interceptor logging to it is appended straight into the bytes
// slog.JSONHandler would write, without a slog.Record (see writeLine).
// Every other line, and every handler derived with WithAttrs or WithGroup,
// is slog's own, on the same writer.
//
// Lines written through a JSONHandler and its derived handlers never
// interleave: both paths write whole lines under one lock.
type JSONHandler struct {
	*slog.JSONHandler
	w *lockedWriter
	// direct says the request line may skip slog: no ReplaceAttr and no
	// AddSource, which would change what is written.
	direct bool
}

// NewJSONHandler returns slog.NewJSONHandler(w, opts), which the interceptor
// recognises. sheba's serve builds its JSON logger with it.
func NewJSONHandler(w io.Writer, opts *slog.HandlerOptions) *JSONHandler {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	lw := &lockedWriter{w: w}
	return &JSONHandler{
		JSONHandler: slog.NewJSONHandler(lw, opts),
		w:           lw,
		direct:      opts.ReplaceAttr == nil && !opts.AddSource,
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// writeLine writes the request line in slog.JSONHandler's format. It
// reports false, having written nothing, for what only slog writes right.
//
// Hand-written because slog.JSONHandler spends about 1.2 µs of CPU on this
// line (a handle state and a buffer from pools, every key escaped, each
// attribute through its generic path) and this about 0.25 µs
// (BenchmarkLine), on sheba's most frequent line, once per call. zap's and
// zerolog's slog handlers measured no cheaper than slog's behind the
// slog.Handler interface, and write another field order. The bytes are
// slog's: TestSameAsSlog compares them with slog.JSONHandler's for the
// same calls.
func (h *JSONHandler) writeLine(t time.Time, level slog.Level, attrs []slog.Attr) bool {
	// slog leaves out a zero time, and writes an error in place of a year
	// RFC 3339 cannot hold.
	if y := t.Year(); t.IsZero() || y < 0 || y >= 10000 {
		return false
	}
	bp := linePool.Get().(*[]byte)
	b := append((*bp)[:0], `{"time":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, level.String()...)
	b = append(b, `","msg":"request"`...)
	for _, a := range attrs {
		// The keys are this package's, none to escape.
		b = append(b, ',', '"')
		b = append(b, a.Key...)
		b = append(b, '"', ':')
		switch a.Value.Kind() {
		case slog.KindDuration:
			// slog's JSON: an integer number of nanoseconds.
			b = strconv.AppendInt(b, int64(a.Value.Duration()), 10)
		default: // the line's attributes are strings otherwise
			b = append(b, '"')
			b = appendJSONString(b, a.Value.String())
			b = append(b, '"')
		}
	}
	b = append(b, '}', '\n')
	_, _ = h.w.Write(b)
	// As slog's buffers: a rare long line's memory is not kept.
	if cap(b) <= 16<<10 {
		*bp = b
		linePool.Put(bp)
	}
	return true
}

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendJSONString appends s escaped as log/slog's JSON handler escapes it
// (appendEscapedJSONString in log/slog/json_handler.go, which follows
// encoding/json without HTML escaping): ", \ and \n \r \t by a backslash,
// other control characters as \u00XX, invalid UTF-8 as \ufffd, U+2028 and
// U+2029 as \u2028 and \u2029. encoding/json itself differs (\b, \f, and
// HTML escaping), so it cannot be used.
func appendJSONString(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if jsonSafe[s[i]] {
			i++
			continue
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

const hexDigits = "0123456789abcdef"

// jsonSafe holds true for the bytes written as they are: printable ASCII
// and DEL, but for " and \.
var jsonSafe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
