// Package grpczstd is a zstd compressor for grpc-go, named "zstd", on top
// of github.com/klauspost/compress/zstd, to stand beside grpc-go's own
// gzip (google.golang.org/grpc/encoding/gzip).
//
// grpc-go keeps compressors in a process-wide registry that it reads
// without locks, so this package registers nothing on import: call
// Register once from main, before any grpc.Server or grpc.ClientConn is
// created. A server then answers zstd requests with zstd, and a client
// may ask for it with grpc.UseCompressor(grpczstd.Name).
//
// Why not github.com/mostynb/go-grpc-compression/zstd, the usual choice: it
// registers itself from init() (sheba does no work in init), and its
// decoder has no window limit, so one small message declaring a 512 MiB
// window would make the server allocate it. This package bounds the
// window, pools encoders and decoders explicitly (no finalizers), and
// encodes and decodes in the caller's goroutine.
package grpczstd

import (
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/encoding"
)

// Name is the grpc-encoding name of the compressor.
const Name = "zstd"

const (
	// maxWindow is the largest window a received message may declare:
	// 8 MiB as for the HTTP zstd content coding (RFC 9659), which every
	// common encoder stays within. A decoder holds about one window
	// while it reads a message; grpc-go bounds the decompressed size
	// itself (MaxRecvMsgSize).
	maxWindow = 8 << 20
	// encoderWindow keeps each pooled encoder, and each receiver's
	// decoder, small; messages are small, and a message shorter than a
	// block is sent as one frame with its exact size anyway.
	encoderWindow = 512 << 10
)

// Register registers the zstd compressor with grpc-go under Name. Call it
// from main before creating servers or connections; grpc-go's registry is
// not safe for concurrent use. Calling it again replaces the compressor
// with an identical one.
func Register() {
	encoding.RegisterCompressor(newCompressor())
}

// compressor implements encoding.Compressor.
type compressor struct {
	encoders sync.Pool // *zstd.Encoder
	decoders sync.Pool // *zstd.Decoder
}

func newCompressor() *compressor {
	c := &compressor{}
	c.encoders.New = func() any {
		// The options are constant and valid, so NewWriter cannot fail.
		enc, _ := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			// One goroutine: the caller's. No goroutine is left
			// behind when the pool drops an encoder.
			zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(encoderWindow),
			zstd.WithLowerEncoderMem(true),
		)
		return enc
	}
	c.decoders.New = func() any {
		dec, _ := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxWindow),
			zstd.WithDecoderMaxMemory(maxWindow),
		)
		return dec
	}
	return c
}

func (c *compressor) Name() string { return Name }

// Compress returns a writer that compresses to w; its Close ends the frame
// and returns the encoder to the pool.
func (c *compressor) Compress(w io.Writer) (io.WriteCloser, error) {
	enc := c.encoders.Get().(*zstd.Encoder)
	enc.Reset(w)
	return &writer{enc: enc, pool: &c.encoders}, nil
}

type writer struct {
	enc  *zstd.Encoder
	pool *sync.Pool
}

func (w *writer) Write(p []byte) (int, error) { return w.enc.Write(p) }

func (w *writer) Close() error {
	err := w.enc.Close()
	// Drop the reference to the destination before pooling.
	w.enc.Reset(nil)
	w.pool.Put(w.enc)
	w.enc = nil
	return err
}

// Decompress returns a reader of the decompressed message. grpc-go calls
// its Close once, which returns the decoder to the pool.
func (c *compressor) Decompress(r io.Reader) (io.Reader, error) {
	dec := c.decoders.Get().(*zstd.Decoder)
	if err := dec.Reset(r); err != nil {
		c.decoders.Put(dec)
		return nil, err
	}
	return &reader{dec: dec, pool: &c.decoders}, nil
}

type reader struct {
	dec  *zstd.Decoder
	pool *sync.Pool
}

func (r *reader) Read(p []byte) (int, error) {
	if r.dec == nil {
		return 0, io.ErrClosedPipe
	}
	return r.dec.Read(p)
}

func (r *reader) Close() error {
	if r.dec == nil {
		return nil
	}
	_ = r.dec.Reset(nil)
	r.pool.Put(r.dec)
	r.dec = nil
	return nil
}
