package grpczstd_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"

	"github.com/shebasvc/sheba/codec/grpczstd"
)

func TestMain(m *testing.M) {
	// As main does: before any server or connection exists.
	grpczstd.Register()
	m.Run()
}

// echoServer answers UnaryCall with the payload it was sent.
type echoServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoServer) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: req.GetPayload()}, nil
}

// inbound records the grpc-encoding and sizes of what the server received.
type inbound struct {
	mu          sync.Mutex
	compression []string
	wire, plain int
}

func (in *inbound) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (in *inbound) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (in *inbound) HandleConn(context.Context, stats.ConnStats) {}
func (in *inbound) HandleRPC(_ context.Context, s stats.RPCStats) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch s := s.(type) {
	case *stats.InHeader:
		in.compression = append(in.compression, s.Compression)
	case *stats.InPayload:
		in.wire += s.CompressedLength
		in.plain += s.Length
	}
}

func start(t *testing.T) (*grpc.ClientConn, *inbound) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in := &inbound{}
	srv := grpc.NewServer(grpc.StatsHandler(in))
	testgrpc.RegisterTestServiceServer(srv, echoServer{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, in
}

func TestRegistered(t *testing.T) {
	c := encoding.GetCompressor(grpczstd.Name)
	if c == nil || c.Name() != "zstd" {
		t.Fatalf("GetCompressor(%q) = %v", grpczstd.Name, c)
	}
}

func TestRoundTrip(t *testing.T) {
	conn, in := start(t)
	client := testgrpc.NewTestServiceClient(conn)
	for _, tc := range []struct {
		compressor string
		size       int
	}{
		{grpczstd.Name, 0},
		{grpczstd.Name, 10},
		{grpczstd.Name, 100_000},
		{grpczstd.Name, 3 << 20}, // several blocks, over the encoder window
		{gzip.Name, 100_000},
	} {
		t.Run(tc.compressor, func(t *testing.T) {
			body := bytes.Repeat([]byte("sheba zstd "), tc.size/11+1)[:tc.size]
			in.mu.Lock()
			in.compression, in.wire, in.plain = nil, 0, 0
			in.mu.Unlock()

			resp, err := client.UnaryCall(t.Context(),
				&testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: body}},
				grpc.UseCompressor(tc.compressor), grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20))
			if err != nil {
				t.Fatalf("UnaryCall: %v", err)
			}
			if !bytes.Equal(resp.GetPayload().GetBody(), body) {
				t.Fatalf("payload of %d bytes came back as %d bytes", len(body), len(resp.GetPayload().GetBody()))
			}
			in.mu.Lock()
			defer in.mu.Unlock()
			if len(in.compression) != 1 || in.compression[0] != tc.compressor {
				t.Errorf("server saw grpc-encoding %q, want %q", in.compression, tc.compressor)
			}
			if tc.size >= 100_000 && in.wire*10 > in.plain {
				t.Errorf("request: %d bytes on the wire for %d, want it compressed", in.wire, in.plain)
			}
		})
	}
}

func TestHealth(t *testing.T) {
	conn, in := start(t)
	for _, name := range []string{grpczstd.Name, gzip.Name} {
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}, grpc.UseCompressor(name))
		if err != nil {
			t.Fatalf("%s: Check: %v", name, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: got %v, want SERVING", name, resp.GetStatus())
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if want := []string{grpczstd.Name, gzip.Name}; len(in.compression) != 2 || in.compression[0] != want[0] || in.compression[1] != want[1] {
		t.Errorf("server saw %q, want %q", in.compression, want)
	}
}

// TestBombBounded reads a small message that expands to 1 GiB the way
// grpc-go does (through a LimitReader at MaxRecvMsgSize+1) and checks that
// the decompressor streams: memory stays far below the expanded size.
func TestBombBounded(t *testing.T) {
	bomb := rleFrame(8192) // 8192 blocks of 128 KiB: 1 GiB
	if got, err := zstdLen(rleFrame(3)); err != nil || got != 3<<17 {
		t.Fatalf("rleFrame(3) decodes to %d bytes (%v), want %d", got, err, 3<<17)
	}
	t.Logf("bomb: %d bytes expanding to 1 GiB", len(bomb))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := encoding.GetCompressor(grpczstd.Name).Decompress(bytes.NewReader(bomb))
	if err != nil {
		t.Fatal(err)
	}
	const limit = 4 << 20 // grpc-go's default MaxRecvMsgSize
	n, err := io.Copy(io.Discard, io.LimitReader(r, limit+1))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.(io.Closer).Close(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n != limit+1 {
		t.Errorf("read %d bytes, want %d", n, limit+1)
	}
	t.Logf("allocated %d KiB", (after.TotalAlloc-before.TotalAlloc)>>10)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("allocated %d MiB, want < 32 MiB", grew>>20)
	}
}

// TestWindowLimit checks that a frame declaring a window over 8 MiB is
// refused rather than allocated.
func TestWindowLimit(t *testing.T) {
	frame := []byte{
		0x28, 0xb5, 0x2f, 0xfd, // magic number
		0x00,             // no content size, not single segment, no checksum
		19 << 3,          // window descriptor: 2^(10+19) bytes = 512 MiB
		0x01, 0x00, 0x00, // last block, raw, empty
	}
	r, err := encoding.GetCompressor(grpczstd.Name).Decompress(bytes.NewReader(frame))
	if err == nil {
		_, err = io.ReadAll(r)
		r.(io.Closer).Close()
	}
	if err == nil {
		t.Fatal("a 512 MiB window was accepted")
	}
}

func TestInvalidStream(t *testing.T) {
	c := encoding.GetCompressor(grpczstd.Name)
	r, err := c.Decompress(bytes.NewReader([]byte("not zstd at all")))
	if err == nil {
		_, err = io.ReadAll(r)
		r.(io.Closer).Close()
	}
	if err == nil {
		t.Fatal("garbage decompressed without error")
	}
	// The pooled decoder still works afterwards.
	var buf bytes.Buffer
	w, _ := c.Compress(&buf)
	_, _ = w.Write([]byte("hello"))
	_ = w.Close()
	r, err = c.Decompress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.(io.Closer).Close()
	if err != nil || string(got) != "hello" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func BenchmarkCompressor(b *testing.B) {
	c := encoding.GetCompressor(grpczstd.Name)
	msg := bytes.Repeat([]byte(`{"id":"0194ff00-0000-7000-8000-000000000001","plan":"pro-monthly"}`), 100)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		w, _ := c.Compress(&buf)
		_, _ = w.Write(msg)
		_ = w.Close()
		r, _ := c.Decompress(&buf)
		_, _ = io.Copy(io.Discard, r)
		r.(io.Closer).Close()
	}
}

// rleFrame is a zstd frame of n blocks, each 128 KiB of zeros in four
// bytes (RFC 8878 §3.1.1.2, RLE blocks): a bomb built in no time.
func rleFrame(n int) []byte {
	frame := []byte{
		0x28, 0xb5, 0x2f, 0xfd, // magic number
		0x00,   // no content size, not single segment, no checksum
		7 << 3, // window descriptor: 2^(10+7) bytes = 128 KiB
	}
	for i := range n {
		hdr := 128<<10<<3 | 1<<1 // block size, type RLE
		if i == n-1 {
			hdr |= 1 // last block
		}
		frame = append(frame, byte(hdr), byte(hdr>>8), byte(hdr>>16), 0x00)
	}
	return frame
}

func zstdLen(frame []byte) (int64, error) {
	d, err := zstd.NewReader(bytes.NewReader(frame))
	if err != nil {
		return 0, err
	}
	defer d.Close()
	return io.Copy(io.Discard, d)
}
