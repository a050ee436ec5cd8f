package app

import (
	"bytes"
	"log"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/credentials"

	"github.com/shebasvc/sheba/internal/connlimit"
	"github.com/shebasvc/sheba/internal/resetguard"
)

// The listeners, as the listener label of the connection metrics names
// them.
const (
	listenerGRPC     = "grpc"
	listenerHTTP     = "http"
	listenerOperator = "operator"
)

// connMetrics are the counters of what the listeners refuse and cut
// (docs/observability.md#metrics), and the one limiter of the log lines of
// failed TLS handshakes, which both listeners share.
type connMetrics struct {
	refused, closed, handshakeErrors *prometheus.CounterVec
	logHandshake                     *rate.Sometimes
}

func newConnMetrics(reg prometheus.Registerer) (connMetrics, error) {
	m := connMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_connections_refused_total",
			Help: "Connections accepted and closed at once because the listener held limits.max_connections, by listener (grpc, http, operator).",
		}, []string{"listener"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_connections_closed_total",
			Help: "Connections sheba ended, by reason (stream_resets: the client reset HTTP/2 streams faster than it completed calls) and listener.",
		}, []string{"reason", "listener"}),
		handshakeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sheba_tls_handshake_errors_total",
			Help: "TLS handshakes that failed, by listener (grpc, http).",
		}, []string{"listener"}),
		logHandshake: &rate.Sometimes{Interval: time.Second},
	}
	for _, c := range []prometheus.Collector{m.refused, m.closed, m.handshakeErrors} {
		if err := reg.Register(c); err != nil {
			return connMetrics{}, err
		}
	}
	return m, nil
}

// The reasons of sheba_connections_closed_total.
const closedStreamResets = "stream_resets"

// listenerGuard is what one listener counts and logs of its connections:
// those refused for limits.max_connections, those ended for resetting
// streams (resets), and, with TLS, failed handshakes. Each kind is logged
// at most once a second, as a flood of them comes at connection rate:
// refusals and resets per listener, failed handshakes over both
// listeners.
type listenerGuard struct {
	name string
	log  *slog.Logger
	max  int
	// maxStreams is the HTTP/2 streams a connection may have open.
	maxStreams int
	resets     *resetguard.Guard

	refused, closed, handshakeErrors prometheus.Counter
	logRefused, logClosed            rate.Sometimes
	logHandshake                     *rate.Sometimes
}

// newListenerGuard returns the guard of listener name, which holds at most
// maxConns connections, each of which may have maxStreams HTTP/2 streams
// open; tls says it serves TLS, whose failed handshakes it counts.
func newListenerGuard(name string, maxConns, maxStreams int, tls bool, m connMetrics, log *slog.Logger) *listenerGuard {
	g := &listenerGuard{
		name: name, log: log.With("listener", name), max: maxConns, maxStreams: maxStreams,
		refused:      m.refused.WithLabelValues(name),
		closed:       m.closed.WithLabelValues(closedStreamResets, name),
		logRefused:   rate.Sometimes{Interval: time.Second},
		logClosed:    rate.Sometimes{Interval: time.Second},
		logHandshake: m.logHandshake,
	}
	if tls {
		g.handshakeErrors = m.handshakeErrors.WithLabelValues(name)
	}
	// A connection may reset four times the streams it may have open more
	// than it completes calls: a client that cancels every call it has
	// open, four times over, and completes none
	// (docs/operations.md#connections-and-streams).
	g.resets = resetguard.New(4*maxStreams, g.closedForResets)
	return g
}

// listen bounds l to the guard's connections.
func (g *listenerGuard) listen(l net.Listener) net.Listener {
	return connlimit.NewListener(l, g.max, func() {
		g.refused.Inc()
		g.logRefused.Do(func() {
			g.log.Warn("refused connections: limits.max_connections are open; counted in sheba_connections_refused_total",
				"max_connections", g.max)
		})
	})
}

func (g *listenerGuard) closedForResets(remote net.Addr) {
	g.closed.Inc()
	g.logClosed.Do(func() {
		g.log.Warn("closed a connection whose client reset HTTP/2 streams faster than it completed calls; counted in sheba_connections_closed_total",
			"remote_addr", remote.String())
	})
}

// handshakeFailed counts a failed TLS handshake, and logs it unless one,
// of either listener, was logged within the second.
func (g *listenerGuard) handshakeFailed(remote, reason string) {
	if g.handshakeErrors == nil {
		// A plaintext listener has no handshake to fail.
		return
	}
	g.handshakeErrors.Inc()
	g.logHandshake.Do(func() {
		g.log.Warn("TLS handshake failed; those of the next second are counted in sheba_tls_handshake_errors_total, not logged",
			"remote_addr", remote, "error", reason)
	})
}

// grpcCreds are the TransportCredentials of grpc.addr: TLS (or none), with
// each connection's frames watched by the guard's resets once its
// handshake is done, and failed TLS handshakes counted and logged by the
// guard. grpc-go logs them only at its debug level.
type grpcCreds struct {
	credentials.TransportCredentials
	guard *listenerGuard
}

func (c grpcCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		c.guard.handshakeFailed(raw.RemoteAddr().String(), err.Error())
		return conn, info, err
	}
	return c.guard.resets.Conn(conn), info, nil
}

func (c grpcCreds) Clone() credentials.TransportCredentials {
	return grpcCreds{TransportCredentials: c.TransportCredentials.Clone(), guard: c.guard}
}

// tlsHandshakeError starts the line net/http's server logs for every
// failed TLS handshake: "http: TLS handshake error from ADDR: REASON". It
// has no hook for them but its ErrorLog.
const tlsHandshakeError = "http: TLS handshake error from "

// errorLog returns the http.Server's ErrorLog of the guard's listener: the
// lines of failed TLS handshakes go to the guard, every other line to log
// at WARN, as slog.NewLogLogger would send it.
func (g *listenerGuard) errorLog(l *slog.Logger) *log.Logger {
	return log.New(errorLogWriter{guard: g, log: l}, "", 0)
}

type errorLogWriter struct {
	guard *listenerGuard
	log   *slog.Logger
}

func (w errorLogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSuffix(p, []byte("\n")))
	if rest, ok := strings.CutPrefix(line, tlsHandshakeError); ok {
		remote, reason, _ := strings.Cut(rest, ": ")
		w.guard.handshakeFailed(remote, reason)
		return len(p), nil
	}
	w.log.Warn(line)
	return len(p), nil
}
