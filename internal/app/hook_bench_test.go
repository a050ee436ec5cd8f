package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/store/storetest"
)

// BenchmarkGatewayHook serves REST pings through the whole HTTP handler, as
// BenchmarkGatewayJSON does, without a hook and with each kind of hook
// answering at once on 127.0.0.1 (or a unix socket) in this process: the
// difference to "none" is what a hook costs a call, the hook server's work
// included.
func BenchmarkGatewayHook(b *testing.B) {
	const key = "bench-key-0123456789abcdefghijklmnop"
	base := config.Default()
	base.Database.URL = storetest.NewDatabase(b)
	base.Auth.Keys = []config.APIKey{keyEntry("bench", key)}

	answer := func(body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
		})
	}
	echo := httptest.NewServer(answer(`{"control":"continue"}`))
	defer echo.Close()
	h2c := httptest.NewUnstartedServer(answer(`{"control":"continue"}`))
	h2c.Config.Protocols = new(http.Protocols)
	h2c.Config.Protocols.SetUnencryptedHTTP2(true)
	h2c.Start()
	defer h2c.Close()
	cached := httptest.NewServer(answer(`{"control":"continue","cacheSeconds":3600}`))
	defer cached.Close()
	dir, err := os.MkdirTemp("", "hookbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "hook.sock")
	unixLis, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	unixSrv := &http.Server{Handler: answer(`{"control":"continue"}`)}
	go unixSrv.Serve(unixLis)
	defer unixSrv.Close()
	authzLis := listen(b)
	authz := grpc.NewServer()
	authv3.RegisterAuthorizationServer(authz, allowAll{})
	go authz.Serve(authzLis)
	defer authz.Stop()

	for _, bc := range []struct {
		name, url, protocol string
		methods             []string
	}{
		{name: "none"},
		// The hook is on but does not see pings: what the REST side pays
		// to share the request with the chain.
		{name: "other-methods", url: cached.URL, methods: []string{"/sheba.v1.AccountService/Login"}},
		{name: "http", url: echo.URL},
		{name: "http-unix", url: "unix://" + sock},
		{name: "h2c", url: "h2c://" + h2c.Listener.Addr().String() + "/"},
		{name: "http-cached", url: cached.URL},
		{name: "ext_authz", url: "grpc://" + authzLis.Addr().String(), protocol: config.HookExtAuthz},
	} {
		cfg := base
		cfg.Hook.URL = bc.url
		// Generous, as make bench's: a load spike on a shared machine
		// must not turn into 503s.
		cfg.Hook.Timeout = time.Second
		cfg.Hook.Methods = bc.methods
		if bc.protocol != "" {
			cfg.Hook.Protocol = bc.protocol
		}
		h := benchApp(b, cfg).Handler()
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			// Calls in flight at once, as under load: a hook call's wait
			// is then spent on other calls, as in make bench.
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest(http.MethodGet, "/v1/ping", nil)
					req.Header.Set("X-Api-Key", key)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Errorf("got %d, want 200: %s", rec.Code, rec.Body)
						return
					}
				}
			})
		})
	}
}

// allowAll is an ext_authz server that allows every call.
type allowAll struct {
	authv3.UnimplementedAuthorizationServer
}

func (allowAll) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{Status: &rpcstatus.Status{}}, nil
}
