// Command hookecho is the external request hook of `make bench`'s hook
// rows: the lightest service that speaks both of sheba's hook protocols
// (the hook section of sheba's config), so that a row measures what
// sheba spends on calling a hook rather than what a hook spends deciding.
//
//   - http: every POST, whatever its path, has its body read and discarded
//     and answers 200 with a fixed document: {"control":"continue"}, or
//     with -mode cached {"control":"continue","cacheSeconds":60}, which lets
//     sheba cache the decision. It listens on -addr (TCP: HTTP/1.1, and
//     HTTP/2 with prior knowledge, h2c) and, with -unix, on a unix socket
//     too.
//   - ext_authz: with -grpc, an envoy.service.auth.v3.Authorization server
//     whose Check answers status OK to every request.
//
// A GET on the http listener answers the number of checks answered so far,
// over both protocols, as a decimal line: the driver's readiness probe, and
// its proof that sheba called the hook during a run.
//
// Like the other baselines it sets no GOMAXPROCS: pinned to the server CPU
// with taskset, the Go runtime sees one CPU.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"golang.org/x/sync/errgroup"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// The answers of -mode.
var answers = map[string][]byte{
	"continue": []byte(`{"control":"continue"}`),
	"cached":   []byte(`{"control":"continue","cacheSeconds":60}`),
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "TCP listen address of the http protocol")
	unixPath := flag.String("unix", "", "also serve the http protocol on this unix socket (replaced if it exists)")
	grpcAddr := flag.String("grpc", "", "listen address of the ext_authz Authorization server (none when empty)")
	mode := flag.String("mode", "continue", "the http answer: continue, or cached (continue with cacheSeconds 60)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *unixPath, *grpcAddr, *mode); err != nil {
		fmt.Fprintln(os.Stderr, "hookecho:", err)
		os.Exit(1)
	}
}

// run listens on every address before it serves any, so that once the
// http listener answers, the others accept connections too.
func run(ctx context.Context, addr, unixPath, grpcAddr, mode string) error {
	answer, ok := answers[mode]
	if !ok {
		return fmt.Errorf("-mode %q: want continue or cached", mode)
	}
	var calls atomic.Int64
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			l.Close()
		}
	}()
	listen := func(network, address string) (net.Listener, error) {
		l, err := net.Listen(network, address)
		if err != nil {
			return nil, err
		}
		lis = append(lis, l)
		return l, nil
	}
	httpLis, err := listen("tcp", addr)
	if err != nil {
		return err
	}
	var unixLis, grpcLis net.Listener
	if unixPath != "" {
		// A socket file left by a killed run would make the listen fail.
		if err := os.Remove(unixPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if unixLis, err = listen("unix", unixPath); err != nil {
			return err
		}
	}
	if grpcAddr != "" {
		if grpcLis, err = listen("tcp", grpcAddr); err != nil {
			return err
		}
	}

	srv := &http.Server{Handler: checkHandler(answer, &calls), ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	// h2c is told from HTTP/1.1 by its preface: one listener serves both.
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	g, ctx := errgroup.WithContext(ctx)
	serveHTTP := func(l net.Listener) {
		g.Go(func() error {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	serveHTTP(httpLis)
	if unixLis != nil {
		serveHTTP(unixLis)
	}
	var gs *grpc.Server
	if grpcLis != nil {
		gs = grpc.NewServer()
		authv3.RegisterAuthorizationServer(gs, authorizer{calls: &calls})
		g.Go(func() error { return gs.Serve(grpcLis) })
	}
	g.Go(func() error {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if gs != nil {
			gs.Stop()
		}
		return srv.Shutdown(shutdownCtx)
	})
	return g.Wait()
}

// checkHandler answers the http protocol: answer to every POST, the count
// of checks to a GET.
func checkHandler(answer []byte, calls *atomic.Int64) http.Handler {
	// Assigned rather than Set, which would canonicalize and allocate on
	// every call.
	jsonType := []string{"application/json"}
	textType := []string{"text/plain; charset=utf-8"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header()["Content-Type"] = textType
			fmt.Fprintln(w, calls.Load())
			return
		}
		// Read to the end so that the connection is reused.
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		w.Header()["Content-Type"] = jsonType
		_, _ = w.Write(answer)
	})
}

// authorizer is the ext_authz Authorization server: OK to every Check.
type authorizer struct {
	calls *atomic.Int64
}

// okResponse is shared by every answer: gRPC only reads it to marshal it.
var okResponse = &authv3.CheckResponse{
	Status:       &rpcstatus.Status{Code: int32(codes.OK)},
	HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
}

func (a authorizer) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	a.calls.Add(1)
	return okResponse, nil
}
