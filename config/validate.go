package config

import (
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http/httpguts"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// Validate reports the first problem with c, checking keys in the order of
// the YAML (http, grpc, database, limits, auth, compression, shutdown, log,
// idempotency, paging, webhooks, redis, hook, tls, operator, events), so the same config always yields the
// same error. The error is an *Error whose Env is empty; Load fills it in when
// the value came from the environment. Validate parses database.url and
// redis.url but connects nowhere.
func (c Config) Validate() error {
	if e := c.check(); e != nil {
		return e
	}
	return nil
}

// check is Validate returning the concrete type, so Load can add Env.
func (c Config) check() *Error {
	checks := []func() *Error{
		func() *Error { return checkAddr("http.addr", c.HTTP.Addr) },
		func() *Error { return atLeast("http.max_body_bytes", c.HTTP.MaxBodyBytes, 1) },
		func() *Error {
			if n := c.HTTP.MaxBodyBytes; n > maxBytes {
				return bad("http.max_body_bytes", "must be at most %d (64 MiB), got %d", maxBytes, n)
			}
			return nil
		},
		func() *Error { return positive("http.read_header_timeout", c.HTTP.ReadHeaderTimeout) },
		func() *Error { return positive("http.read_timeout", c.HTTP.ReadTimeout) },
		func() *Error {
			if c.HTTP.ReadTimeout < c.HTTP.ReadHeaderTimeout {
				return bad("http.read_timeout", "must be at least http.read_header_timeout (%v), which it includes; got %v",
					c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout)
			}
			return nil
		},
		func() *Error { return positive("http.idle_timeout", c.HTTP.IdleTimeout) },
		func() *Error {
			if d := c.HTTP.WriteTimeout; d < 0 {
				return bad("http.write_timeout", "must be at least 0 (0 means limits.timeout + 10s), got %v", d)
			}
			return nil
		},
		func() *Error { return atLeast("http.max_concurrent_bodies", c.HTTP.MaxConcurrentBodies, 1) },
		func() *Error { return checkOrigins(c.HTTP.CORS.AllowedOrigins) },
		func() *Error { return checkAddr("grpc.addr", c.GRPC.Addr) },
		func() *Error { return checkAddrsDiffer(c.HTTP.Addr, c.GRPC.Addr) },
		func() *Error { return atLeast("grpc.max_concurrent_streams", c.GRPC.MaxConcurrentStreams, 1) },
		func() *Error {
			if n := c.GRPC.MaxRecvBytes; n < 1 || n > maxBytes {
				return bad("grpc.max_recv_bytes", "must be from 1 to %d (64 MiB), got %d", maxBytes, n)
			}
			return nil
		},
		func() *Error { return atLeast("grpc.max_open_streams", c.GRPC.MaxOpenStreams, 1) },
		func() *Error { return positive("grpc.max_connection_idle", c.GRPC.MaxConnectionIdle) },
		func() *Error { return checkDatabaseURL(c.Database.URL) },
		func() *Error { return atLeast("database.max_conns", c.Database.MaxConns, 1) },
		func() *Error { return checkReadURL(c.Database.ReadURL) },
		func() *Error { return atLeast("database.read_max_conns", c.Database.ReadMaxConns, 1) },
		func() *Error { return positive("database.read_max_lag", c.Database.ReadMaxLag) },
		func() *Error { return atLeast("limits.max_inflight", c.Limits.MaxInflight, 1) },
		func() *Error { return atLeast("limits.max_connections", c.Limits.MaxConnections, 1) },
		func() *Error { return checkRate("limits.rate", c.Limits.Rate) },
		func() *Error { return checkBurst("limits.burst", c.Limits.Burst, "limits.rate", c.Limits.Rate) },
		func() *Error { return checkRate("limits.per_key_rate", c.Limits.PerKeyRate) },
		func() *Error {
			return checkBurst("limits.per_key_burst", c.Limits.PerKeyBurst, "limits.per_key_rate", c.Limits.PerKeyRate)
		},
		func() *Error {
			if r := c.Limits.AnonymousRate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
				return bad("limits.anonymous_rate", "must be a finite number, at least 0 (0 means the same as limits.rate), got %v", r)
			}
			return nil
		},
		func() *Error {
			rate, burst := c.Limits.AnonymousLimit()
			if c.Limits.AnonymousBurst < 0 {
				return bad("limits.anonymous_burst", "must be at least 0 (0 means the same as limits.burst), got %d", c.Limits.AnonymousBurst)
			}
			if rate > 0 && burst < 1 {
				return bad("limits.anonymous_burst", "must be at least 1 when the anonymous rate is above 0 (it is %v); set it or limits.burst", rate)
			}
			return nil
		},
		func() *Error { return positive("limits.timeout", c.Limits.Timeout) },
		func() *Error { return checkMinInflight(c.Limits) },
		func() *Error {
			if n := c.Limits.LoginFailures.Max; n < 0 {
				return bad("limits.login_failures.max", "must be at least 0 (0 turns the login throttle off), got %d", n)
			}
			return nil
		},
		func() *Error {
			f := c.Limits.LoginFailures
			if f.MaxAll < 0 || (f.MaxAll > 0 && f.MaxAll < f.Max) {
				return bad("limits.login_failures.max_all", "must be 0 (10 × limits.login_failures.max) or at least limits.login_failures.max (%d), got %d", f.Max, f.MaxAll)
			}
			return nil
		},
		// Retry-After counts whole seconds: a shorter window would be
		// announced as longer than it is.
		func() *Error {
			return atLeast("limits.login_failures.window", c.Limits.LoginFailures.Window, time.Second)
		},
		func() *Error { return checkKeys(c.Auth.Keys) },
		func() *Error {
			return checkMethods("auth.public", c.Auth.Public, shebav1.PingService_Ping_FullMethodName)
		},
		func() *Error { return atLeast("compression.min_bytes", c.Compression.MinBytes, 0) },
		func() *Error { return atLeast("shutdown.drain_delay", c.Shutdown.DrainDelay, 0) },
		func() *Error { return positive("shutdown.timeout", c.Shutdown.Timeout) },
		func() *Error {
			if c.Shutdown.Timeout <= c.Shutdown.DrainDelay {
				return bad("shutdown.timeout", "must be longer than shutdown.drain_delay (%v), which it includes; got %v",
					c.Shutdown.DrainDelay, c.Shutdown.Timeout)
			}
			return nil
		},
		func() *Error { return oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error") },
		func() *Error { return oneOf("log.format", c.Log.Format, "json", "text") },
		func() *Error { return checkIdempotencyTTL(c.Idempotency.TTL) },
		func() *Error { return checkPagingSecret(c.Paging.Secret) },
		func() *Error { return positive("webhooks.timeout", c.Webhooks.Timeout) },
		func() *Error { return atLeast("webhooks.max_attempts", c.Webhooks.MaxAttempts, 1) },
		func() *Error { return positive("webhooks.backoff.base", c.Webhooks.Backoff.Base) },
		func() *Error {
			if c.Webhooks.Backoff.Max < c.Webhooks.Backoff.Base {
				return bad("webhooks.backoff.max", "must be at least webhooks.backoff.base (%v), got %v",
					c.Webhooks.Backoff.Base, c.Webhooks.Backoff.Max)
			}
			return nil
		},
		func() *Error {
			return atLeast("webhooks.per_endpoint_concurrency", c.Webhooks.PerEndpointConcurrency, 1)
		},
		func() *Error { return atLeast("webhooks.max_endpoints", c.Webhooks.MaxEndpoints, 1) },
		func() *Error {
			if d := c.Webhooks.SecretOverlap; d < 0 {
				return bad("webhooks.secret_overlap", "must be at least 0 (0 stops the replaced secret at once), got %v", d)
			}
			return nil
		},
		// River keeps one connection for LISTEN, and fetches, completes and
		// works jobs beside it.
		func() *Error { return atLeast("webhooks.database_max_conns", c.Webhooks.DatabaseMaxConns, 4) },
		func() *Error { return checkRedisURL(c.Redis.URL) },
		func() *Error { return checkRedisTimeout(c.Redis.Timeout) },
		func() *Error { return checkFallbackShare(c.Redis.FallbackShare) },
		func() *Error { return oneOf("hook.protocol", c.Hook.Protocol, HookHTTP, HookExtAuthz) },
		func() *Error { return checkHookURL(c.Hook.URL, c.Hook.Protocol) },
		func() *Error {
			return checkMethods("hook.methods", c.Hook.Methods, shebav1.SubscriptionService_CreateSubscription_FullMethodName)
		},
		func() *Error { return positive("hook.timeout", c.Hook.Timeout) },
		func() *Error { return oneOf("hook.failure_mode", c.Hook.FailureMode, HookFailClosed, HookFailOpen) },
		func() *Error { return checkHookHeaders(c.Hook.Headers) },
		func() *Error { return atLeast("hook.cache_entries", c.Hook.CacheEntries, 0) },
		func() *Error {
			switch t := c.TLS; {
			case t.CertFile != "" && t.KeyFile == "":
				return bad("tls.key_file", "must be set with tls.cert_file")
			case t.KeyFile != "" && t.CertFile == "":
				return bad("tls.cert_file", "must be set with tls.key_file")
			case t.ClientCAFile != "" && t.CertFile == "":
				return bad("tls.client_ca_file", "needs tls.cert_file and tls.key_file: client certificates are asked for over TLS only")
			}
			return nil
		},
		func() *Error {
			if c.Operator.Addr == "" {
				return nil
			}
			if e := checkAddr("operator.addr", c.Operator.Addr); e != nil {
				return e
			}
			for _, other := range []struct{ key, addr string }{{"http.addr", c.HTTP.Addr}, {"grpc.addr", c.GRPC.Addr}} {
				if e := checkAddrsDiffer(other.addr, c.Operator.Addr); e != nil {
					return bad("operator.addr", "must differ from %s (%s)", other.key, other.addr)
				}
			}
			return nil
		},
		func() *Error {
			if d := c.Events.Heartbeat; d < time.Second || d > time.Minute {
				return bad("events.heartbeat", "must be from 1s to 1m0s, got %v", d)
			}
			return nil
		},
		func() *Error { return atLeast("events.max_streams_per_key", c.Events.MaxStreamsPerKey, 1) },
		func() *Error { return atLeast("events.max_streams", c.Events.MaxStreams, 1) },
		func() *Error {
			if c.Events.MaxStreamsPerKey > c.Events.MaxStreams {
				return bad("events.max_streams_per_key", "must be at most events.max_streams (%d), got %d",
					c.Events.MaxStreams, c.Events.MaxStreamsPerKey)
			}
			return nil
		},
		func() *Error {
			if d := c.Events.MaxDuration; d <= 0 || d >= MaxEventsDuration {
				return bad("events.max_duration", "must be greater than 0 and below %v (the gRPC connection age, %v, less its 10%% jitter: a stream must end itself before its connection is closed), got %v",
					MaxEventsDuration, GRPCMaxConnectionAge, d)
			}
			return nil
		},
		func() *Error {
			if n := c.Events.Buffer; n < 1 || n > MaxEventsBuffer {
				return bad("events.buffer", "must be from 1 to %d, got %d", MaxEventsBuffer, n)
			}
			return nil
		},
		func() *Error { return positive("events.retention", c.Events.Retention) },
	}
	for _, check := range checks {
		if e := check(); e != nil {
			return e
		}
	}
	return nil
}

// checkPagingSecret checks paging.secret: empty, or 32 bytes in hex. The
// message never repeats the value, which is a secret.
func checkPagingSecret(s string) *Error {
	if s == "" {
		return nil
	}
	if b, err := hex.DecodeString(s); err != nil || len(b) != 32 {
		return bad("paging.secret", "must be exactly 64 hex digits (32 random bytes, e.g. from `openssl rand -hex 32`), got %d characters", len(s))
	}
	return nil
}

// Key returns the bytes of paging.secret, nil when it is empty. Call it on
// a validated Config.
func (p Paging) Key() []byte {
	b, _ := hex.DecodeString(p.Secret)
	if len(b) == 0 {
		return nil
	}
	return b
}

// maxBytes is the most http.max_body_bytes and grpc.max_recv_bytes may
// be. A body or message is held whole in memory before it is decoded, and
// sheba's valid requests are a few KiB, so 64 MiB leaves room for any use
// without letting one request take a pod's memory; the gateway's
// arithmetic on a body relies on the bound too (server/gateway refuses
// more).
const maxBytes = 64 << 20

// bad returns an *Error for key.
func bad(key, format string, args ...any) *Error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// atLeast checks v >= least. Durations print as durations.
func atLeast[T ~int | ~int32 | ~int64](key string, v, least T) *Error {
	if v < least {
		return bad(key, "must be at least %v, got %v", least, v)
	}
	return nil
}

// positive checks v > 0. Durations print as durations.
func positive[T ~int64](key string, v T) *Error {
	if v <= 0 {
		return bad(key, "must be greater than 0, got %v", v)
	}
	return nil
}

// checkAddr checks that addr is host:port with a numeric port, as
// net.Listen takes it.
func checkAddr(key, addr string) *Error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return bad(key, "must be host:port such as \":8080\" or \"127.0.0.1:8080\", got %q", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return bad(key, "port must be a number from 0 to 65535, got %q", addr)
	}
	return nil
}

// checkAddrsDiffer catches both servers configured on the same address,
// which would otherwise only fail when the second one listens. Port 0 picks
// a free port, so it never clashes.
func checkAddrsDiffer(httpAddr, grpcAddr string) *Error {
	hh, hp, _ := net.SplitHostPort(httpAddr)
	gh, gp, _ := net.SplitHostPort(grpcAddr)
	hn, _ := strconv.Atoi(hp)
	gn, _ := strconv.Atoi(gp)
	if hh == gh && hn == gn && hn != 0 {
		return bad("grpc.addr", "must differ from http.addr, both are %q", grpcAddr)
	}
	return nil
}

// checkDatabaseURL checks that url is set and parses. The parser's message
// is left out on purpose: it quotes the URL, password included, on a
// best-effort redaction only.
func checkDatabaseURL(url string) *Error {
	if url == "" {
		return bad("database.url", "must be set: set DATABASE_URL (or database.url in the config file) to a postgres URL")
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return bad("database.url", "must be a postgres URL (postgres://user:password@host:5432/dbname) or a key/value string (host=... dbname=...); the value given does not parse")
	}
	// With several hosts pgx takes the first that answers; only
	// read-write makes that the one that accepts writes ("primary" asks
	// pg_is_in_recovery(), which a demoted server kept read-only denies).
	if severalHosts(cfg) && !writesOnly(cfg) {
		return bad("database.url", "names several hosts, so it must say target_session_attrs=read-write (postgres://h1:5432,h2:5432/sheba?target_session_attrs=read-write): sheba writes only to a server that accepts writes")
	}
	return nil
}

// severalHosts reports whether cfg names more than one server. pgx's
// fallbacks also hold each host a second time with another TLS mode
// (sslmode=prefer tries TLS, then plain), so hosts are counted, not
// fallbacks.
func severalHosts(cfg *pgx.ConnConfig) bool {
	for _, f := range cfg.Fallbacks {
		if f.Host != cfg.Host || f.Port != cfg.Port {
			return true
		}
	}
	return false
}

// writesOnly reports whether cfg connects only to a server that accepts
// writes: target_session_attrs=read-write, which pgx parses into a check
// function and does not keep as text.
func writesOnly(cfg *pgx.ConnConfig) bool {
	return cfg.ValidateConnect != nil &&
		reflect.ValueOf(cfg.ValidateConnect).Pointer() == reflect.ValueOf(pgconn.ValidateConnectTargetSessionAttrsReadWrite).Pointer()
}

// checkReadURL checks database.read_url, which may be empty.
func checkReadURL(url string) *Error {
	if url == "" {
		return nil
	}
	if _, err := pgx.ParseConfig(url); err != nil {
		return bad("database.read_url", "must be a postgres URL (postgres://user:password@standby:5432/dbname) or a key/value string, or empty; the value given does not parse")
	}
	return nil
}

// checkRate checks a token bucket rate.
func checkRate(key string, r float64) *Error {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return bad(key, "must be a finite number, got %v", r)
	}
	if r < 0 {
		return bad(key, "must be at least 0 (0 means no limit), got %v", r)
	}
	return nil
}

// checkBurst checks a token bucket size against its rate: a bucket of 0
// tokens with a positive rate would reject every request.
func checkBurst(key string, burst int, rateKey string, rate float64) *Error {
	if burst < 0 {
		return bad(key, "must be at least 0, got %d", burst)
	}
	if rate > 0 && burst < 1 {
		return bad(key, "must be at least 1 when %s is above 0 (it is %v), got %d", rateKey, rate, burst)
	}
	return nil
}

// checkKeys checks the API keys. Messages never quote a sha256 value, in
// case a raw key was pasted there by mistake.
func checkKeys(keys []APIKey) *Error {
	ids := make(map[string]int)
	hashes := make(map[string]int)
	for i, k := range keys {
		at := fmt.Sprintf("auth.keys[%d]", i)
		if k.ID == "" {
			return bad(at+".id", "must be set")
		}
		if !ValidKeyID(k.ID) {
			return bad(at+".id", "must be 1 to 64 of a-z 0-9 . _ - starting with a letter or digit, got %q", k.ID)
		}
		if j, ok := ids[k.ID]; ok {
			return bad(at+".id", "%q is already the id of auth.keys[%d]", k.ID, j)
		}
		ids[k.ID] = i
		if !validSHA256(k.SHA256) {
			return bad(at+".sha256", "must be exactly 64 lowercase hex digits (the SHA-256 of the key, as `sheba apikey new` prints it), got %d characters", len(k.SHA256))
		}
		if j, ok := hashes[k.SHA256]; ok {
			return bad(at+".sha256", "is the same hash as auth.keys[%d] (%q)", j, keys[j].ID)
		}
		hashes[k.SHA256] = i
	}
	return nil
}

// ValidKeyID reports whether id is a valid auth.keys[].id: it matches [a-z0-9][a-z0-9._-]{0,63}.
func ValidKeyID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := range len(id) {
		b := id[i]
		switch {
		case 'a' <= b && b <= 'z', '0' <= b && b <= '9':
		case i > 0 && (b == '.' || b == '_' || b == '-'):
		default:
			return false
		}
	}
	return true
}

// validSHA256 reports whether s is 64 lowercase hex digits.
func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		b := s[i]
		if !('0' <= b && b <= '9' || 'a' <= b && b <= 'f') {
			return false
		}
	}
	return true
}

// validMethod reports whether m has the shape /pkg.Service/Method, each
// part a proto identifier.
func validMethod(m string) bool {
	rest, ok := strings.CutPrefix(m, "/")
	if !ok {
		return false
	}
	service, method, ok := strings.Cut(rest, "/")
	if !ok || !validIdent(method) {
		return false
	}
	parts := strings.Split(service, ".")
	if len(parts) < 2 {
		return false
	}
	return !slices.ContainsFunc(parts, func(p string) bool { return !validIdent(p) })
}

// validIdent reports whether s is a proto identifier.
func validIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', b == '_':
		case i > 0 && '0' <= b && b <= '9':
		default:
			return false
		}
	}
	return true
}

// oneOf checks that v is one of allowed.
func oneOf(key, v string, allowed ...string) *Error {
	if !slices.Contains(allowed, v) {
		return bad(key, "must be one of %s; got %q", strings.Join(allowed, ", "), v)
	}
	return nil
}

// checkIdempotencyTTL checks idempotency.ttl: a key must outlive the
// retries of the request it protects.
func checkIdempotencyTTL(ttl time.Duration) *Error {
	if ttl < time.Second {
		return bad("idempotency.ttl", "must be at least 1s, got %v", ttl)
	}
	return nil
}

// checkMinInflight checks the floor of the adaptive concurrency limit.
func checkMinInflight(l Limits) *Error {
	if e := atLeast("limits.min_inflight", l.MinInflight, 1); e != nil {
		return e
	}
	if l.Adaptive && l.MinInflight > l.MaxInflight {
		return bad("limits.min_inflight", "must be at most limits.max_inflight (%d) when limits.adaptive is true, got %d", l.MaxInflight, l.MinInflight)
	}
	return nil
}

// checkRedisURL checks that a set redis.url parses. Like database.url, the
// value and the parser's message are left out: they may quote a password.
func checkRedisURL(url string) *Error {
	if url == "" {
		return nil
	}
	if _, err := redis.ParseURL(url); err != nil {
		return bad("redis.url", "must be empty (limits per process) or a redis:// or rediss:// URL (redis://user:password@host:6379/0); the value given does not parse")
	}
	return nil
}

// checkRedisTimeout checks the bound of one decision in Redis: above a
// second, a slow Redis would hold every request.
func checkRedisTimeout(d time.Duration) *Error {
	if d <= 0 || d > time.Second {
		return bad("redis.timeout", "must be greater than 0 and at most 1s (a few milliseconds is usual), got %v", d)
	}
	return nil
}

// checkFallbackShare checks the share of each rate a replica admits alone
// while Redis is out: 0 would refuse every call, and more than 1 would
// admit more than the shared limit on each replica.
func checkFallbackShare(share float64) *Error {
	if !(share > 0 && share <= 1) {
		return bad("redis.fallback_share", "must be above 0 and at most 1 (the share of each rate a replica admits alone while Redis is out), got %v", share)
	}
	return nil
}

// Warnings returns what is allowed in c but likely a mistake, or not what
// the API's policy says (auth.public), one line each, for `sheba serve` to
// log and `sheba config check` to print. Call it on a validated Config.
func (c Config) Warnings() []string {
	var w []string
	if s, l := c.Shutdown, c.Limits; s.Timeout <= s.DrainDelay+l.Timeout {
		w = append(w, fmt.Sprintf("shutdown.timeout (%v) is not longer than shutdown.drain_delay (%v) + limits.timeout (%v): requests in flight at shutdown may be cut (docs/operations.md#graceful-shutdown)",
			s.Timeout, s.DrainDelay, l.Timeout))
	}
	if c.Paging.Secret == "" {
		w = append(w, "paging.secret is not set: page tokens and the passwords in idempotency fingerprints are keyed with a random key of this process, so on other replicas and after a restart tokens fail and sign-up retries with an Idempotency-Key answer 422 (docs/configuration.md#paging)")
	}
	if p := policyWarning(c.Auth.Public); p != "" {
		w = append(w, p)
	}
	return w
}

// checkHookURL checks hook.url against the schemes of its protocol.
func checkHookURL(raw, protocol string) *Error {
	if raw == "" {
		return nil
	}
	schemes := []string{"http", "https", "h2c", "unix"}
	if protocol == HookExtAuthz {
		schemes = []string{"grpc", "unix"}
	}
	u, err := url.Parse(raw)
	if err != nil || !slices.Contains(schemes, u.Scheme) {
		return bad("hook.url", "must be a URL of scheme %s for protocol %s, got %q", strings.Join(schemes, ", "), protocol, raw)
	}
	if u.User != nil {
		// The hook's client sends no credentials: they would be dropped.
		return bad("hook.url", "must not hold a user or password")
	}
	if u.Scheme == "unix" {
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") || len(u.Path) < 2 {
			return bad("hook.url", "must name a socket by its absolute path, as unix:///run/hook.sock; got %q", raw)
		}
		return nil
	}
	if u.Host == "" || u.Port() == "" && u.Scheme != "http" && u.Scheme != "https" {
		return bad("hook.url", "must name a host and port, as %s://127.0.0.1:9000; got %q", u.Scheme, raw)
	}
	if u.Scheme == "grpc" && (u.Path != "" || u.RawQuery != "") {
		return bad("hook.url", "must be grpc://host:port, with no path (the service is Envoy's Authorization); got %q", raw)
	}
	return nil
}

// checkOrigins checks http.cors.allowed_origins: "*", or origins as a
// browser sends them in its Origin header, so that each can match one:
// http or https, a host, a port only when it is not the scheme's default,
// nothing else (no path, not even "/"), in lowercase.
func checkOrigins(origins []string) *Error {
	for i, o := range origins {
		key := fmt.Sprintf("http.cors.allowed_origins[%d]", i)
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" ||
			u.User != nil || u.RawPath != "" || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.HasSuffix(o, "#"):
			return bad(key, "must be \"*\" or an origin such as \"https://app.example.com\" or \"http://localhost:3000\" (scheme, host and port only), got %q", o)
		case strings.Contains(o, "*"):
			return bad(key, "a wildcard is allowed only as the whole entry \"*\", got %q", o)
		case o != strings.ToLower(o):
			return bad(key, "must be in lowercase, as browsers send it, got %q", o)
		case u.Port() == "80" && u.Scheme == "http" || u.Port() == "443" && u.Scheme == "https":
			return bad(key, "browsers send the origin without the scheme's default port: write %q, got %q", u.Scheme+"://"+u.Hostname(), o)
		}
	}
	return nil
}

// checkHookHeaders checks hook.headers: lowercase header names, never the
// API key's.
func checkHookHeaders(names []string) *Error {
	for i, n := range names {
		key := fmt.Sprintf("hook.headers[%d]", i)
		switch {
		// apikey.CarriesKey, which the hook applies too.
		case n == "x-api-key" || n == "authorization" || n == "grpc-metadata-x-api-key" || n == "grpc-metadata-authorization":
			return bad(key, "%q carries the API key, which the hook never sees", n)
		case !httpguts.ValidHeaderFieldName(n) || n != strings.ToLower(n):
			return bad(key, "must be a header name in lowercase, such as \"user-agent\", got %q", n)
		}
	}
	return nil
}
