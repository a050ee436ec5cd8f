package main

// The peer rows: sheba's ping against the frameworks its users would pick
// instead (bench/peers, a module of its own), each with its usual
// production middleware on, REST and gRPC, sheba and each peer alternated
// in a row of its own (bench/README.md).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The peer row groups: -scenario peer-rest runs a row for each peer.
const (
	scenPeerREST = "peer-rest"
	scenPeerGRPC = "peer-grpc"
)

// peer is one program under bench/peers.
type peer struct {
	// key is its folder under bench/peers, its binary's name, the key of
	// its process in bench.servers and the last part of its rows' names.
	key string
	// name and module: the framework, and the module whose version the
	// label shows (read from the binary's build info).
	name, module string
}

// peers are the programs under bench/peers, in the order their rows run.
var peers = []peer{
	{key: "kratos", name: "Kratos", module: "github.com/go-kratos/kratos/v2"},
	{key: "gozero", name: "go-zero", module: "github.com/zeromicro/go-zero"},
	{key: "gateway", name: "grpc-gateway + go-grpc-middleware", module: "github.com/grpc-ecosystem/grpc-gateway/v2"},
}

// peerRow is the row of group (peer-rest or peer-grpc) against p:
// peer-rest/kratos.
func peerRow(group string, p peer) string { return group + "/" + p.key }

// peerServer is the key in bench.servers of p's process.
func peerServer(p peer) string { return "peer-" + p.key }

// scenarioGroups are the names -scenario takes for several rows.
var scenarioGroups = map[string][]string{
	scenPeerREST: peerRows(scenPeerREST),
	scenPeerGRPC: peerRows(scenPeerGRPC),
}

func peerRows(group string) []string {
	var out []string
	for _, p := range peers {
		out = append(out, peerRow(group, p))
	}
	return out
}

// peerScenarioNames are every peer row.
var peerScenarioNames = slices.Concat(peerRows(scenPeerREST), peerRows(scenPeerGRPC))

// peerScenarios are the peer rows: ping-rest's and ping-grpc's sheba side
// against each peer, with the same loads.
func (b *bench) peerScenarios(restPing, grpcPing func(*server) load) []scenario {
	sheba := func(expect string, l func(*server) load) side {
		return side{label: "sheba", server: srvSheba, expect: []string{expect}, load: l}
	}
	var rest, grpc []scenario
	for _, p := range peers {
		label := p.name
		if v := b.peerVersions[p.key]; v != "" {
			label += " " + v
		}
		rest = append(rest, scenario{
			name:  peerRow(scenPeerREST, p),
			about: "GET /v1/ping (ping-rest) against " + label + " serving the same route and JSON with its usual production middleware (bench/README.md, Peers)",
			a:     sheba("200", restPing),
			b:     side{label: label, server: peerServer(p), expect: []string{"200"}, load: restPing},
			conc:  b.opts.conc,
		})
		grpc = append(grpc, scenario{
			name:  peerRow(scenPeerGRPC, p),
			about: "PingService/Ping over gRPC (ping-grpc) against " + label + " serving the same RPC with its usual production middleware (bench/README.md, Peers)",
			a:     sheba("OK", grpcPing),
			b:     side{label: label, server: peerServer(p), expect: []string{"OK"}, load: grpcPing},
			conc:  b.opts.conc,
		})
	}
	return append(rest, grpc...)
}

// buildPeers builds every program under bench/peers into bin, with that
// module's own go.mod (GOWORK=off: its dependencies are not the
// service's), and records the framework version each was built with.
func (b *bench) buildPeers(ctx context.Context, bin string) error {
	args := []string{"build", "-o", bin + "/"}
	for _, p := range peers {
		args = append(args, "./"+p.key)
	}
	cmd := exec.CommandContext(ctx, b.opts.goCmd, args...)
	cmd.Dir = filepath.Join(b.repo, "bench", "peers")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s (in bench/peers): %v\n%s", strings.Join(args[1:], " "), err, out)
	}
	b.bins.peers = map[string]string{}
	b.peerVersions = map[string]string{}
	for _, p := range peers {
		path := filepath.Join(bin, p.key)
		b.bins.peers[p.key] = path
		b.peerVersions[p.key] = buildDeps(path)[p.module]
	}
	return nil
}

// startPeer starts p's program pinned to the server CPU, REST and gRPC on
// free ports of 127.0.0.1, and waits until both answer.
func (b *bench) startPeer(ctx context.Context, p peer) (*server, error) {
	s, err := b.startHTTPGRPC(ctx, peerServer(p), b.opts.serverCPU, func(httpAddr, grpcAddr string) []string {
		return []string{b.bins.peers[p.key], "-http", httpAddr, "-grpc", grpcAddr}
	})
	if err != nil {
		return nil, err
	}
	if err := s.proc.waitReady(ctx, 10*time.Second, func(ctx context.Context) error { return grpcPing(ctx, s.grpcAddr) }); err != nil {
		s.proc.stop(time.Second)
		return nil, err
	}
	return s, nil
}

// peerByServer is the peer whose process is server key, if any.
func peerByServer(key string) (peer, bool) {
	for _, p := range peers {
		if peerServer(p) == key {
			return p, true
		}
	}
	return peer{}, false
}

// cheapestPeerNotes are the notes under the table that name, for each
// group in the run, the peer cheapest in CPU per request and sheba's ratio
// to it: the row with the highest ratio. The goal of the group (sheba at
// most a bound of the cheapest peer's CPU per request) is each of its
// rows' goal, so it is met when every row's is.
func cheapestPeerNotes(rep report) []string {
	var out []string
	for _, group := range []string{scenPeerREST, scenPeerGRPC} {
		var worst *scenarioReport
		for i, s := range rep.Scenarios {
			if !strings.HasPrefix(s.Name, group+"/") || s.Unavailable != "" || len(s.Sides) != 2 {
				continue
			}
			if worst == nil || s.CPURatio > worst.CPURatio {
				worst = &rep.Scenarios[i]
			}
		}
		if worst == nil {
			continue
		}
		note := fmt.Sprintf("%s: the cheapest peer is %s at %s CPU/req, sheba at %s in its row: %.2f× (%s)", group, worst.Sides[1].Label,
			fmtMs(worst.Sides[1].Summary.CPUPerReqUS/1000), fmtMs(worst.Sides[0].Summary.CPUPerReqUS/1000), worst.CPURatio, span(worst.CPURatios))
		if _, ok := goalOf(*worst); ok {
			note += "; goal " + judge(*worst, nil).String()
		}
		out = append(out, note)
	}
	return out
}
