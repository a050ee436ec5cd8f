package app

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/internal/mdset"
)

// sendHeadersOnce runs next with the call's response headers collected
// (mdset) and sent with one SendHeader when it returns. grpc-go's stream
// copies all the headers set so far on every SetHeader (metadata.Join), and
// the chain sets them in several links: 8 allocations of a gRPC ping, 4
// with this (BenchmarkGRPCPing). SendHeader takes its metadata as it is;
// the headers go out in a HEADERS frame of their own ahead of the answer or
// of the status, as grpc-go sends the headers set with SetHeader; a call
// that set none still ends in one trailers-only frame.
//
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors need grpc-go's
// own stream in the context and fail under it; sheba calls neither (a
// response is compressed as the client's grpc-encoding asks).
func sendHeadersOnce(next grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		stream := grpc.ServerTransportStreamFromContext(ctx)
		if stream == nil {
			return next(ctx, req, info, handler)
		}
		s := &headerStream{ServerTransportStream: stream}
		resp, err := next(grpc.NewContextWithServerTransportStream(ctx, s), req, info, handler)
		s.flush()
		return resp, err
	}
}

// headerStream collects the headers set on it until they are sent, by its
// SendHeader or by flush; its other methods are the stream's.
type headerStream struct {
	grpc.ServerTransportStream

	mu     sync.Mutex
	header mdset.Set
	sent   bool
}

func (s *headerStream) SetHeader(md metadata.MD) error { return s.add(md, false) }

func (s *headerStream) SendHeader(md metadata.MD) error { return s.add(md, true) }

// add adds md to the headers, and sends them if send. Once they are sent,
// the stream answers (grpc-go's refuses: the headers are gone).
func (s *headerStream) add(md metadata.MD, send bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.sent && send:
		return s.ServerTransportStream.SendHeader(md)
	case s.sent:
		return s.ServerTransportStream.SetHeader(md)
	}
	s.header.Add(md)
	if !send {
		return nil
	}
	s.sent = true
	return s.ServerTransportStream.SendHeader(s.header.MD())
}

// flush sends the headers collected, if there are any and they are not
// sent yet.
func (s *headerStream) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent || len(s.header.MD()) == 0 {
		return
	}
	s.sent = true
	_ = s.ServerTransportStream.SendHeader(s.header.MD())
}
