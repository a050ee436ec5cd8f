// Command gozero is the go-zero peer of `make bench` (bench/README.md):
// sheba's ping, GET /v1/ping on a rest.Server and
// sheba.v1.PingService/Ping on a zrpc server, in one service group, as
// goctl lays a service out, with go-zero's defaults: every middleware its
// config turns on by default (rest: tracing, logging, Prometheus metrics,
// the connection limit, the breaker, load shedding, the timeout, recovery,
// stats, the body limit, gunzip; zrpc: tracing, recovery, stats,
// Prometheus metrics, the breaker, load shedding, the timeout). What the
// config changes from the defaults: logs at level error (a successful call
// is logged at info), a trace sampler of 0 (sheba's bench runs its tracing
// always_off; there is no collector), the shedders' CPU threshold (see
// cpuThreshold) and the dev server, which serves /metrics, on 127.0.0.1.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/zeromicro/go-zero/core/conf"
	"github.com/zeromicro/go-zero/core/proc"
	"github.com/zeromicro/go-zero/core/service"
	"github.com/zeromicro/go-zero/rest"
	"github.com/zeromicro/go-zero/rest/httpx"
	"github.com/zeromicro/go-zero/zrpc"
	"google.golang.org/grpc"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

func main() {
	httpAddr := flag.String("http", "127.0.0.1:8080", "REST listen address")
	grpcAddr := flag.String("grpc", "127.0.0.1:8081", "gRPC listen address")
	devAddr := flag.String("dev", "127.0.0.1:0", "listen address of go-zero's dev server (/metrics, /healthz)")
	flag.Parse()
	// go-zero's proc package handles SIGTERM itself: it shuts the servers
	// down, and serve returns.
	if err := serve(context.Background(), *httpAddr, *grpcAddr, *devAddr); err != nil {
		fmt.Fprintln(os.Stderr, "gozero:", err)
		os.Exit(1)
	}
}

// cpuThreshold is the shedders' CPU threshold (900 of 1000 by default):
// they shed only while the CPU use of the machine's cgroup is over it,
// which the bench's two saturated cores reach. Over 1000 they never
// refuse, while every call still goes through their counting.
const cpuThreshold = 1001

// serve runs the service group until ctx is done or the process is told to
// stop.
func serve(ctx context.Context, httpAddr, grpcAddr, devAddr string) error {
	svc := service.ServiceConf{}
	if err := conf.FillDefault(&svc); err != nil {
		return err
	}
	svc.Name = "peer-gozero"
	svc.Log.Level = "error"
	svc.Telemetry.Sampler = 0
	devHost, devPort, err := hostPort(devAddr)
	if err != nil {
		return err
	}
	svc.DevServer.Host, svc.DevServer.Port = devHost, devPort

	var rc rest.RestConf
	if err := conf.FillDefault(&rc); err != nil {
		return err
	}
	rc.ServiceConf = svc
	if rc.Host, rc.Port, err = hostPort(httpAddr); err != nil {
		return err
	}
	rc.CpuThreshold = cpuThreshold
	restSrv, err := rest.NewServer(rc)
	if err != nil {
		return err
	}
	restSrv.AddRoute(rest.Route{Method: http.MethodGet, Path: "/v1/ping", Handler: pingHandler})

	var gc zrpc.RpcServerConf
	if err := conf.FillDefault(&gc); err != nil {
		return err
	}
	gc.ServiceConf = svc
	gc.ListenOn = grpcAddr
	gc.CpuThreshold = cpuThreshold
	rpcSrv, err := zrpc.NewServer(gc, func(s *grpc.Server) {
		shebav1.RegisterPingServiceServer(s, pingServer{})
	})
	if err != nil {
		return err
	}

	group := service.NewServiceGroup()
	group.Add(restSrv)
	group.Add(rpcSrv)
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			proc.Shutdown()
		case <-stopped:
		}
	}()
	group.Start()
	return nil
}

func hostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	return host, p, err
}

// pingResponse and pingHandler are what goctl writes for a GET route with
// no request type and a response type of one field: the handler calls the
// logic and writes its answer with httpx.
type pingResponse struct {
	Message string `json:"message"`
}

func pingHandler(w http.ResponseWriter, r *http.Request) {
	resp, err := ping(r.Context())
	if err != nil {
		httpx.ErrorCtx(r.Context(), w, err)
		return
	}
	httpx.OkJsonCtx(r.Context(), w, resp)
}

func ping(context.Context) (*pingResponse, error) {
	return &pingResponse{Message: "pong"}, nil
}

type pingServer struct {
	shebav1.UnimplementedPingServiceServer
}

func (pingServer) Ping(context.Context, *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return &shebav1.PingResponse{Message: "pong"}, nil
}
