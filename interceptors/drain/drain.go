package drain

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrShuttingDown ends the streams open at End, and refuses later ones:
// UNAVAILABLE "server shutting down".
var ErrShuttingDown = status.Error(codes.Unavailable, "server shutting down")

// Drainer ends the streams of a server when End is called. The zero value
// is not usable; call New. It is safe for concurrent use.
type Drainer struct {
	ended chan struct{}
	once  sync.Once
}

// New returns a Drainer whose streams run until End.
func New() *Drainer {
	return &Drainer{ended: make(chan struct{})}
}

// End ends every open stream and refuses new ones. Later calls do nothing.
func (d *Drainer) End() { d.once.Do(func() { close(d.ended) }) }

// StreamServerInterceptor returns the interceptor that lets End end the
// streams.
func (d *Drainer) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		select {
		case <-d.ended:
			return ErrShuttingDown
		default:
		}
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		done := make(chan error, 1)
		// The handler runs on its own goroutine so that the stream can be
		// answered while it waits in Recv; it returns once grpc-go has
		// written the answer and cancelled the stream.
		go func() { done <- handler(srv, &stream{ServerStream: ss, ctx: ctx}) }()
		select {
		case err := <-done:
			return err
		case <-d.ended:
			return ErrShuttingDown
		}
	}
}

// stream is a grpc.ServerStream whose context ends with its call or at End.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }
