package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/hook"
)

// newHook builds the external hook's link of the chain from the hook
// section (docs/hook.md), its metrics registered on reg, and the client
// whose connections close with the App; nil and a nil client when
// hook.url is empty. validate checks a request the hook puts in place of
// the call's, as the chain's validation link checks the call's own.
func newHook(c config.Hook, validate func(context.Context, proto.Message) error, log *slog.Logger, tp trace.TracerProvider, reg prometheus.Registerer) (grpc.UnaryServerInterceptor, hook.Client, error) {
	if c.URL == "" {
		return nil, nil, nil
	}
	var client hook.Client
	var err error
	switch c.Protocol {
	case config.HookExtAuthz:
		client, err = hook.NewExtAuthzClient(c.URL)
	default:
		var o hook.HTTPOptions
		if tp != nil {
			// The hook's own spans join the call's trace.
			o.Propagator = propagation.TraceContext{}
		}
		client, err = hook.NewHTTPClient(c.URL, o)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("hook.url: %w", err)
	}
	m := hook.NewMetrics()
	if err := reg.Register(m); err != nil {
		client.Close()
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	return hook.UnaryServerInterceptor(client,
		hook.WithMethods(c.Methods...),
		hook.WithTimeout(c.Timeout),
		hook.WithFailOpen(c.FailureMode == config.HookFailOpen),
		// ext_authz sends no body; its cache key needs none either.
		hook.WithSendBody(c.SendBody && c.Protocol == config.HookHTTP),
		hook.WithHeaders(c.Headers...),
		hook.WithCache(c.CacheEntries),
		hook.WithValidator(validate),
		hook.WithMetrics(m),
		hook.WithTracerProvider(tp),
		hook.WithLogger(log),
	), client, nil
}
