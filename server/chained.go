package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// RegisterChained registers every service on r with each method running
// chain before the service's method, as a server interceptor would, but
// with the method's UnaryServerInfo and handler made once here. The
// generated handlers make both on every call once a server has an
// interceptor: 2 of the allocations sheba adds to a gRPC call
// (BenchmarkGRPCPing). The registrar must therefore have no unary
// interceptor of its own for these services. A method missing from
// direct keeps its generated handler, given chain as its interceptor
// (TestDirectCoversEveryMethod keeps direct complete).
//
// A grpc.Server it registers on takes Codec (grpc.ForceServerCodecV2), so
// that a request refused before it is unmarshalled (a message over
// grpc.max_recv_bytes, a repeated field over its bound) reaches the chain,
// which answers it: each method hands the chain the refusal in place of the
// message, and the chain's bounds link answers it (CheckRequest).
func (s *Services) RegisterChained(r grpc.ServiceRegistrar, chain grpc.UnaryServerInterceptor) {
	for _, svc := range s.services() {
		desc := *svc.desc
		desc.Methods = make([]grpc.MethodDesc, len(svc.desc.Methods))
		for i, m := range svc.desc.Methods {
			desc.Methods[i] = chained(svc.desc.ServiceName, m, svc.impl, chain)
		}
		r.RegisterService(&desc, svc.impl)
	}
}

// chained is m with its handler running chain, then the method of impl.
func chained(service string, m grpc.MethodDesc, impl any, chain grpc.UnaryServerInterceptor) grpc.MethodDesc {
	full := "/" + service + "/" + m.MethodName
	d, ok := direct[full]
	if !ok {
		generated := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			return generated(srv, ctx, dec, chain)
		}
		return m
	}
	info := &grpc.UnaryServerInfo{Server: impl, FullMethod: full}
	handler := func(ctx context.Context, req any) (any, error) { return d.call(impl, ctx, req) }
	m.Handler = func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := d.newRequest()
		if err := dec(in); err != nil {
			// grpc-go has answered it already (its RecvMsg writes the
			// status of its errors), before the chain: a refusal the chain
			// must answer goes through Codec instead.
			return nil, err
		}
		return chain(ctx, in.request(), info, handler)
	}
	return m
}

// directMethod is one method called without its generated handler: a new
// request to decode into (its message, which Codec may refuse instead),
// and the call of the service's method.
type directMethod struct {
	newRequest func() decodeTarget
	call       func(impl any, ctx context.Context, req any) (any, error)
}

// method makes the directMethod of f, a method expression of a service
// interface (shebav1.PingServiceServer.Ping). Like the generated handler,
// it hands back the method's *Res as it is, nil included.
func method[S, Req any, P interface {
	*Req
	proto.Message
}, Res any](f func(S, context.Context, P) (*Res, error)) directMethod {
	return directMethod{
		newRequest: func() decodeTarget { return new(request[Req, P]) },
		call: func(impl any, ctx context.Context, req any) (any, error) {
			return f(impl.(S), ctx, req.(P))
		},
	}
}

// direct holds every method by its full name.
var direct = map[string]directMethod{
	shebav1.PingService_Ping_FullMethodName: method(shebav1.PingServiceServer.Ping),

	shebav1.AccountService_CreateAccount_FullMethodName: method(shebav1.AccountServiceServer.CreateAccount),
	shebav1.AccountService_Login_FullMethodName:         method(shebav1.AccountServiceServer.Login),
	shebav1.AccountService_GetAccount_FullMethodName:    method(shebav1.AccountServiceServer.GetAccount),

	shebav1.SubscriptionService_CreateSubscription_FullMethodName: method(shebav1.SubscriptionServiceServer.CreateSubscription),
	shebav1.SubscriptionService_GetSubscription_FullMethodName:    method(shebav1.SubscriptionServiceServer.GetSubscription),
	shebav1.SubscriptionService_CancelSubscription_FullMethodName: method(shebav1.SubscriptionServiceServer.CancelSubscription),
	shebav1.SubscriptionService_ListSubscriptions_FullMethodName:  method(shebav1.SubscriptionServiceServer.ListSubscriptions),

	shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName: method(shebav1.WebhookServiceServer.CreateWebhookEndpoint),
	shebav1.WebhookService_GetWebhookEndpoint_FullMethodName:    method(shebav1.WebhookServiceServer.GetWebhookEndpoint),
	shebav1.WebhookService_ListWebhookEndpoints_FullMethodName:  method(shebav1.WebhookServiceServer.ListWebhookEndpoints),
	shebav1.WebhookService_DeleteWebhookEndpoint_FullMethodName: method(shebav1.WebhookServiceServer.DeleteWebhookEndpoint),
	shebav1.WebhookService_ListWebhookDeliveries_FullMethodName: method(shebav1.WebhookServiceServer.ListWebhookDeliveries),
	shebav1.WebhookService_RotateWebhookSecret_FullMethodName:   method(shebav1.WebhookServiceServer.RotateWebhookSecret),
}
