package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// RegisterChained registers every service on r with each method running
// chain before the service's method, as a server interceptor would, but
// with the method's UnaryServerInfo and handler made once here, from the
// method table (shebav1.Services: each method's NewRequest and Call). The
// generated handlers make both on every call once a server has an
// interceptor: 2 of the allocations sheba adds to a gRPC call
// (BenchmarkGRPCPing). The registrar must therefore have no unary
// interceptor of its own for these services.
//
// Server-streaming methods are registered as the service's description
// has them (grpc-go's generated handlers): the chain is a unary
// interceptor, which does not run for them; a grpc.Server runs its stream
// interceptors around them, and the gateway's Channel serves them in
// process after its opening has passed the chain (Channel.NewStream).
//
// A grpc.Server it registers on takes Codec (grpc.ForceServerCodecV2), so
// that a request refused before it is unmarshalled (a message over
// grpc.max_recv_bytes, a repeated field over its bound) reaches the chain,
// which answers it: each method hands the chain the refusal in place of the
// message, and the chain's bounds link answers it (CheckRequest).
func (s *Services) RegisterChained(r grpc.ServiceRegistrar, chain grpc.UnaryServerInterceptor) {
	for _, svc := range s.list {
		desc := *svc.table.Desc
		desc.Methods = make([]grpc.MethodDesc, 0, len(svc.table.Methods))
		for _, m := range svc.table.Methods {
			if !m.ServerStreams {
				desc.Methods = append(desc.Methods, chained(m, svc.impl, chain))
			}
		}
		r.RegisterService(&desc, svc.impl)
	}
}

// chained is the grpc.MethodDesc of m whose handler runs chain, then the
// method of impl.
func chained(m shebav1.MethodTable, impl any, chain grpc.UnaryServerInterceptor) grpc.MethodDesc {
	info := &grpc.UnaryServerInfo{Server: impl, FullMethod: m.FullName}
	call, newRequest := m.Call, m.NewRequest
	handler := func(ctx context.Context, req any) (any, error) { return call(impl, ctx, req) }
	return grpc.MethodDesc{
		MethodName: m.Name,
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := requests.Get().(*request)
			in.msg, in.err = newRequest(), nil
			defer in.release()
			if err := dec(in); err != nil {
				// grpc-go has answered it already (its RecvMsg writes
				// the status of its errors), before the chain: a
				// refusal the chain must answer goes through Codec
				// instead.
				return nil, err
			}
			return chain(ctx, in.request(), info, handler)
		},
	}
}

// RecvRequest reads the request of a server-streaming method from ss, a
// new message of newRequest, as RegisterChained's handlers read a unary
// call's: a message Codec refuses unread comes back as its refusal, which
// the chain's bounds link answers (CheckRequest), in place of the message.
func RecvRequest(ss grpc.ServerStream, newRequest func() proto.Message) (any, error) {
	in := &request{msg: newRequest()}
	if err := ss.RecvMsg(in); err != nil {
		return nil, err
	}
	return in.request(), nil
}
