// Package httpcompress is HTTP middleware that compresses responses and
// decompresses request bodies, gzip and zstd both ways.
//
// Responses are compressed by github.com/klauspost/compress/gzhttp, which
// already does all that is needed and is kept by the author of the
// compressors: zstd or gzip chosen by the Accept-Encoding q-values (q=0
// excludes, "*" counts for both, equal q-values prefer zstd), only once the
// body reaches the minimum size (it buffers up to that size to decide),
// never when the handler set Content-Encoding itself, Content-Length dropped
// and Vary: Accept-Encoding added, encoders pooled. HEAD answers are never
// compressed, nor those whose handler sets the NoCompression header. The
// answer to a request that accepts no coding (no Accept-Encoding) or is a
// HEAD goes as gzhttp would send it, without its per-request wrapper.
//
// Request bodies are this package's own: gzhttp decompresses only gzip and
// without a bound on the decompressed size. A body with Content-Encoding
// gzip or zstd is decompressed and read whole before the next handler runs,
// so the next handler sees a plain body with its true Content-Length, and
// the outcome is known before anything else (a body that cannot be decoded
// is answered 400 before the next handler, and so before any auth it does):
//
//   - more than the maximum decompressed bytes: 413, and reading stops
//     right after the maximum, so a decompression bomb costs no more memory
//     than the maximum plus the decoder's window (gzip 32 KiB; zstd up to
//     8 MiB, the limit RFC 9659 sets for the zstd content coding, lowered
//     by WithMaxZstdWindow);
//   - a raw body that went over an http.MaxBytesReader set outside: 413;
//   - an invalid or truncated gzip or zstd stream: 400;
//   - any other Content-Encoding (or several stacked): 415, with
//     Accept-Encoding listing what is accepted (RFC 9110 §12.5.3).
//
// How these errors are written is the caller's choice (WithErrorWriter),
// so the gateway can answer them with a google.rpc.Status body.
//
// Place the handler after the raw body limit and before anything that
// reads the body or measures the response; the handler is safe for
// concurrent use.
package httpcompress
