package hook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// ExtAuthzClient is the Client of Envoy's ext_authz protocol: it asks
// envoy.service.auth.v3.Authorization/Check over gRPC, so a server written
// for Envoy's ext_authz filter serves as the hook unchanged. It holds one
// connection, shared by every call, and is safe for concurrent use.
//
// The hook is told the call's method, path, allowlisted headers (with
// :authority), request id and host, and in the context extensions its
// gRPC method, transport and caller; never its body. An OK status lets
// the call go on with ok_response.response_headers_to_add on its answer
// (ok_response.headers, meant for an upstream request, are ignored). Any
// other status breaks the call with denied_response's HTTP status (403
// when unset or not 4xx/5xx), body as the message, and headers on the
// answer. A gRPC error, an error_response, or an answer with neither a
// status nor an ok_response is a failure of the hook.
type ExtAuthzClient struct {
	conn  *grpc.ClientConn
	authz authv3.AuthorizationClient
}

var _ Client = (*ExtAuthzClient)(nil)

// NewExtAuthzClient returns an ExtAuthzClient of the ext_authz server at
// target, grpc://host:port or unix:///absolute/path.sock, in plaintext.
// It does not connect: the first Check does, and a server that cannot be
// reached fails that Check rather than the constructor.
func NewExtAuthzClient(target string) (*ExtAuthzClient, error) {
	dial, err := extAuthzDialTarget(target)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(dial, grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The hook is a local service: a proxy from the environment must
		// not redirect it.
		grpc.WithNoProxy(),
		// grpc's reconnect backoff grows to 2 minutes: a hook back after an
		// outage would go unused that long.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: extAuthzBackoff, MinConnectTimeout: 5 * time.Second}))
	if err != nil {
		return nil, fmt.Errorf("ext_authz client of %q: %w", target, err)
	}
	return &ExtAuthzClient{conn: conn, authz: authv3.NewAuthorizationClient(conn)}, nil
}

// extAuthzBackoff redials a hook that went away within a second or two.
var extAuthzBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}

// extAuthzDialTarget turns a hook target into grpc's own target syntax.
func extAuthzDialTarget(target string) (string, error) {
	if hostPort, ok := strings.CutPrefix(target, "grpc://"); ok {
		host, port, err := net.SplitHostPort(hostPort)
		n, perr := strconv.ParseUint(port, 10, 16)
		// passthrough hands host:port to the dialer as is, which resolves a
		// name at each connection attempt: the hook is one address, with
		// nothing for grpc's resolvers and balancers to spread calls over.
		if err == nil && perr == nil && n > 0 && host != "" && !strings.ContainsAny(host, "/?#@") {
			return "passthrough:///" + hostPort, nil
		}
	}
	if path, ok := strings.CutPrefix(target, "unix://"); ok &&
		len(path) > 1 && path[0] == '/' && !strings.ContainsAny(path, "?#") {
		return target, nil
	}
	return "", fmt.Errorf("ext_authz target %q: want grpc://host:port or unix:///absolute/path", target)
}

// Check asks the hook about c, bounded by ctx alone.
func (a *ExtAuthzClient) Check(ctx context.Context, c *Call) (Decision, error) {
	resp, err := a.authz.Check(ctx, &extAuthzNewRequest(c).check)
	if err != nil {
		return Decision{}, fmt.Errorf("ext_authz check: %w", err)
	}
	return extAuthzDecision(resp)
}

// Close closes the client's connection.
func (a *ExtAuthzClient) Close() error {
	return a.conn.Close()
}

// extAuthzRequest is a CheckRequest together with the messages it points
// to, so that building one is a single allocation rather than four.
type extAuthzRequest struct {
	check authv3.CheckRequest
	attrs authv3.AttributeContext
	req   authv3.AttributeContext_Request
	http  authv3.AttributeContext_HttpRequest
}

// The context extensions sheba sets on every CheckRequest.
const (
	extAuthzGRPCMethod = "grpc_method"
	extAuthzTransport  = "transport"
	extAuthzCallerID   = "api_key_id"
)

// extAuthzNewRequest builds the CheckRequest that tells of c.
func extAuthzNewRequest(c *Call) *extAuthzRequest {
	headers := make(map[string]string, len(c.Headers)+1)
	for name, values := range c.Headers {
		switch len(values) {
		case 0: // Envoy has no way to say a header without a value
		case 1:
			headers[name] = values[0]
		default:
			// Envoy sends a repeated header as one, its values joined by
			// commas; servers written for it expect no other shape.
			headers[name] = strings.Join(values, ",")
		}
	}
	if c.Authority != "" {
		headers[":authority"] = c.Authority
	}
	ext := make(map[string]string, 3)
	ext[extAuthzGRPCMethod] = c.Method
	ext[extAuthzTransport] = c.Transport
	if c.CallerID != "" {
		ext[extAuthzCallerID] = c.CallerID
	}

	r := new(extAuthzRequest)
	r.http.Id = c.ID
	r.http.Method = c.HTTPMethod
	r.http.Path = c.Path
	r.http.Host = c.Authority
	r.http.Headers = headers
	// The body is never sent, and the protocol reads 0 as an empty one:
	// -1 is its "unknown".
	r.http.Size = -1
	r.req.Http = &r.http
	r.attrs.Request = &r.req
	r.attrs.ContextExtensions = ext
	r.check.Attributes = &r.attrs
	return r
}

func extAuthzDecision(resp *authv3.CheckResponse) (Decision, error) {
	if resp.GetErrorResponse() != nil {
		return Decision{}, fmt.Errorf("ext_authz check: the hook answered an error_response (status %d %q)",
			resp.GetStatus().GetCode(), resp.GetStatus().GetMessage())
	}
	// As Envoy does: a status of code OK, or none (whose code reads as 0),
	// lets the call go on, whatever else the answer holds.
	if resp.GetStatus().GetCode() == 0 {
		return Decision{ResponseHeaders: extAuthzHeaders(resp.GetOkResponse().GetResponseHeadersToAdd())}, nil
	}
	denied := resp.GetDeniedResponse()
	code := int(denied.GetStatus().GetCode())
	if code < 400 || code > 599 {
		// Envoy's own default for a denial, and the one status sure to
		// read as one.
		code = http.StatusForbidden
	}
	return Decision{
		Break:           code,
		Message:         denied.GetBody(),
		ResponseHeaders: extAuthzHeaders(denied.GetHeaders()),
	}, nil
}

// extAuthzHeaders returns opts by lowercase name, nil when there are none.
// Their append actions are not applied: a Decision's headers are added to
// an answer that carries no hook headers of its own.
func extAuthzHeaders(opts []*corev3.HeaderValueOption) map[string][]string {
	var h map[string][]string
	for _, o := range opts {
		hv := o.GetHeader()
		if hv.GetKey() == "" {
			continue // no answer can carry a header without a name
		}
		v := hv.GetValue()
		if v == "" {
			v = string(hv.GetRawValue())
		}
		if h == nil {
			h = make(map[string][]string, len(opts))
		}
		name := strings.ToLower(hv.GetKey())
		h[name] = append(h[name], v)
	}
	return h
}
