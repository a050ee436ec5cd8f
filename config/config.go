package config

import (
	"strings"
	"time"
)

// Config is the whole of sheba's configuration. The yaml tags are the keys
// of the config file and, uppercased, the suffixes of the environment
// variables that override them.
type Config struct {
	HTTP        HTTP        `yaml:"http"`
	GRPC        GRPC        `yaml:"grpc"`
	Database    Database    `yaml:"database"`
	Limits      Limits      `yaml:"limits"`
	Auth        Auth        `yaml:"auth"`
	Compression Compression `yaml:"compression"`
	Shutdown    Shutdown    `yaml:"shutdown"`
	Log         Log         `yaml:"log"`
	Idempotency Idempotency `yaml:"idempotency"`
	Paging      Paging      `yaml:"paging"`
	Webhooks    Webhooks    `yaml:"webhooks"`
	Redis       Redis       `yaml:"redis"`
	Hook        Hook        `yaml:"hook"`
	TLS         TLS         `yaml:"tls"`
	Operator    Operator    `yaml:"operator"`
	Events      Events      `yaml:"events"`
}

// Events configures the event streams of EventService.StreamEvents.
type Events struct {
	// Heartbeat is how often an idle stream gets a heartbeat: from 1s to
	// 60s.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// MaxStreamsPerKey bounds the streams one API key has open on one
	// replica.
	MaxStreamsPerKey int `yaml:"max_streams_per_key"`
	// MaxStreams bounds the streams open on one replica.
	MaxStreams int `yaml:"max_streams"`
	// MaxDuration is how long a stream lasts before it ends, resumable;
	// below GRPCMaxConnectionAge less its jitter (MaxEventsDuration), so a
	// stream ends itself before its connection is closed.
	MaxDuration time.Duration `yaml:"max_duration"`
	// Buffer is the events held for a stream whose client is slow; once
	// it is full the stream is cut.
	Buffer int `yaml:"buffer"`
	// Retention is how far back a stream can resume.
	Retention time.Duration `yaml:"retention"`
}

// GRPCMaxConnectionAge is the age after which the gRPC server closes a
// connection gracefully; grpc-go adds ±10% jitter to it.
const GRPCMaxConnectionAge = 30 * time.Minute

// MaxEventsDuration is the bound events.max_duration stays below: the
// shortest age at which a gRPC connection may be closed, 90% of
// GRPCMaxConnectionAge.
const MaxEventsDuration = GRPCMaxConnectionAge * 9 / 10

// MaxEventsBuffer bounds events.buffer: a stream's buffer holds a pointer
// per event (the events are encoded once for every stream), so even a full
// one stays far within the 64 KiB a stream may take.
const MaxEventsBuffer = 4096

// TLS configures TLS on both business listeners (docs/tls.md). The files
// are re-read when they change.
type TLS struct {
	// CertFile and KeyFile are the PEM certificate (chain) and key; set
	// together, both listeners serve TLS only.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, set, makes every business connection present a client
	// certificate signed by it (mTLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

// Enabled reports whether the listeners serve TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// Operator configures the operator port.
type Operator struct {
	// Addr, set, serves /livez, /readyz, /metrics and gRPC health there in
	// plaintext, and no longer the first three on http.addr.
	Addr string `yaml:"addr"`
}

// HTTP configures the REST gateway and operator endpoints.
type HTTP struct {
	// Addr is the host:port to listen on.
	Addr string `yaml:"addr"`
	// MaxBodyBytes bounds a request body after decompression; at most
	// 64 MiB (a browser protocol's message is bounded by GRPC.MaxRecvBytes
	// too).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadHeaderTimeout bounds the time a client may take to send a
	// request's headers.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds the time a client may take to send a whole
	// request, headers and body.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// IdleTimeout is how long a kept-alive connection may wait for its next
	// request.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout bounds the time to answer a request once its headers
	// are read (docs/operations.md#slow-clients); 0 means limits.timeout +
	// 10s (Config.HTTPWriteTimeout).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxConcurrentBodies bounds the request bodies of keyed calls read
	// and decoded at once; the rest wait a moment, then are answered 429.
	MaxConcurrentBodies int `yaml:"max_concurrent_bodies"`
	// CORS grants web pages of other origins the API.
	CORS CORS `yaml:"cors"`
}

// CORS configures cross-origin requests from browsers to the REST routes
// and the browser protocols (Connect, gRPC-Web).
type CORS struct {
	// AllowedOrigins are the origins ("https://app.example.com") whose
	// pages may call the API; "*" allows every origin. Empty: no CORS
	// headers at all, and browsers refuse every cross-origin call.
	AllowedOrigins []string `yaml:"allowed_origins"`
}

// GRPC configures the gRPC server.
type GRPC struct {
	// Addr is the host:port to listen on.
	Addr string `yaml:"addr"`
	// Reflection turns on the gRPC server reflection service.
	Reflection bool `yaml:"reflection"`
	// MaxConcurrentStreams bounds the calls one connection carries at once.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// MaxRecvBytes bounds a gRPC, Connect or gRPC-Web request message
	// after decompression: one larger is refused RESOURCE_EXHAUSTED.
	MaxRecvBytes int `yaml:"max_recv_bytes"`
	// MaxOpenStreams bounds the health Watch and reflection streams open at
	// once over all connections; one more is RESOURCE_EXHAUSTED.
	MaxOpenStreams int `yaml:"max_open_streams"`
	// MaxConnectionIdle is how long a connection with no call open is
	// kept before it is closed (with GOAWAY).
	MaxConnectionIdle time.Duration `yaml:"max_connection_idle"`
}

// Database configures the Postgres pool.
type Database struct {
	// URL is a postgres:// URL or a key/value DSN. It may hold a password,
	// so it is never printed.
	URL string `yaml:"url"`
	// MaxConns is the pool's maximum number of connections.
	MaxConns int32 `yaml:"max_conns"`
	// ReadURL, set, names standbys (or a pooler of standbys) that the
	// read-only methods run on while their replay lag is at most
	// ReadMaxLag (docs/operations.md#postgres-cluster). It may hold a
	// password, so it is never printed.
	ReadURL string `yaml:"read_url"`
	// ReadMaxConns is the most connections of the pool on ReadURL.
	ReadMaxConns int32 `yaml:"read_max_conns"`
	// ReadMaxLag is how far behind the primary a standby may be and still
	// be read from; it is also how long a caller's reads go to the
	// primary after its write.
	ReadMaxLag time.Duration `yaml:"read_max_lag"`
}

// Limits configures admission of business requests.
type Limits struct {
	// MaxInflight is the number of business requests that may run at once;
	// one more is shed at once.
	MaxInflight int `yaml:"max_inflight"`
	// MaxConnections bounds the connections each listener (grpc.addr,
	// http.addr, operator.addr) holds at once; one more is accepted and
	// closed at once.
	MaxConnections int `yaml:"max_connections"`
	// Rate is the global token bucket rate in requests per second; 0 means
	// no limit.
	Rate float64 `yaml:"rate"`
	// Burst is the global token bucket size.
	Burst int `yaml:"burst"`
	// PerKeyRate is the rate allowed to each API key in requests per second;
	// 0 means no limit.
	PerKeyRate float64 `yaml:"per_key_rate"`
	// PerKeyBurst is the token bucket size of each API key.
	PerKeyBurst int `yaml:"per_key_burst"`
	// AnonymousRate is the rate of the bucket of calls that bring no API
	// key (public methods), kept apart from Rate so that anonymous callers
	// cannot starve keyed ones; 0 means the same as Rate.
	AnonymousRate float64 `yaml:"anonymous_rate"`
	// AnonymousBurst is the size of that bucket; 0 means the same as Burst.
	AnonymousBurst int `yaml:"anonymous_burst"`
	// Timeout is the deadline given to a request that brings none or a
	// longer one.
	Timeout time.Duration `yaml:"timeout"`
	// Adaptive lets the concurrency limit move between MinInflight and
	// MaxInflight by the latency it measures (a gradient limiter).
	Adaptive bool `yaml:"adaptive"`
	// MinInflight is the lowest the adaptive limit goes.
	MinInflight int `yaml:"min_inflight"`
	// LoginFailures slows repeated failed logins for one username.
	LoginFailures LoginFailures `yaml:"login_failures"`
}

// LoginFailures configures the login throttle (docs/api.md#login): after
// Max failed logins of one caller (API key) for one username within
// Window, further logins of that caller for it answer 429 LOGIN_THROTTLED
// until the window has passed; after MaxAll of every caller, the logins of
// all of them do.
type LoginFailures struct {
	// Max is the failed logins of one caller for one username a window
	// allows; 0 turns the throttle off.
	Max int `yaml:"max"`
	// MaxAll is the failed logins of every caller together for one
	// username a window allows; 0 means 10 × Max.
	MaxAll int `yaml:"max_all"`
	// Window is how long the failures are counted from the first one, and
	// so the longest a username stays throttled.
	Window time.Duration `yaml:"window"`
}

// Redis configures the store of the limits shared by every replica: the
// rate limits and the login throttle.
type Redis struct {
	// URL is a redis:// or rediss:// URL; empty means each process limits
	// alone. It may hold a password, so it is never printed.
	URL string `yaml:"url"`
	// Timeout bounds one decision in Redis; a slower one, or a Redis that
	// is down, makes the replica fall back to its own buckets and counts.
	Timeout time.Duration `yaml:"timeout"`
	// FallbackShare is the share of each rate and burst that a replica's
	// own buckets admit while Redis is down or slow.
	FallbackShare float64 `yaml:"fallback_share"`
}

// Hook configures the external request hook (docs/hook.md): a service of
// the operator's asked about every business call before its handler.
type Hook struct {
	// URL is where the hook is: empty for none; http://, https:// or
	// h2c:// (HTTP/2 without TLS) host:port/path, or unix:///path for the
	// http protocol; grpc://host:port or unix:///path for ext_authz.
	URL string `yaml:"url"`
	// Protocol is http (sheba's JSON protocol) or ext_authz (Envoy's
	// Authorization/Check over gRPC).
	Protocol string `yaml:"protocol"`
	// Methods are the full gRPC method names the hook sees; empty: every
	// business method.
	Methods []string `yaml:"methods"`
	// Timeout bounds each hook call, within what is left of the call's
	// deadline.
	Timeout time.Duration `yaml:"timeout"`
	// FailureMode is what a failed hook call does: closed answers 503
	// HOOK_UNAVAILABLE, open lets the call go on.
	FailureMode string `yaml:"failure_mode"`
	// SendBody includes the request message in what the http protocol
	// sends.
	SendBody bool `yaml:"send_body"`
	// Headers are the request headers (lowercase names) the hook is told
	// of; the API key's headers never are.
	Headers []string `yaml:"headers"`
	// CacheEntries bounds the decisions kept that the hook marked
	// cacheable; 0 keeps none.
	CacheEntries int `yaml:"cache_entries"`
}

// The hook.failure_mode values.
const (
	HookFailClosed = "closed"
	HookFailOpen   = "open"
)

// The hook.protocol values.
const (
	HookHTTP     = "http"
	HookExtAuthz = "ext_authz"
)

// Auth configures API-key authentication.
type Auth struct {
	// Keys are the accepted API keys, stored as their SHA-256.
	Keys []APIKey `yaml:"keys"`
	// Public lists full gRPC method names callable without a key; by
	// default the methods whose policy is public in the protos.
	Public []string `yaml:"public"`
}

// APIKey is one accepted API key.
type APIKey struct {
	// ID names the caller in metrics, logs and traces.
	ID string `yaml:"id"`
	// SHA256 is the hex SHA-256 of the key, 64 lowercase hex digits.
	SHA256 string `yaml:"sha256"`
}

// Compression configures REST response compression.
type Compression struct {
	// MinBytes is the smallest response that is compressed.
	MinBytes int `yaml:"min_bytes"`
}

// Shutdown configures graceful shutdown.
type Shutdown struct {
	// DrainDelay is how long readiness reports not ready before the
	// servers stop accepting.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// Timeout bounds the whole shutdown, drain delay included.
	Timeout time.Duration `yaml:"timeout"`
}

// Log configures the slog logger.
type Log struct {
	// Level is one of debug, info, warn, error.
	Level string `yaml:"level"`
	// Format is json or text.
	Format string `yaml:"format"`
}

// Idempotency configures idempotency keys (docs/api.md#idempotency-keys).
type Idempotency struct {
	// TTL is how long the outcome of a request sent with a key is kept; a
	// retry after it runs anew.
	TTL time.Duration `yaml:"ttl"`
}

// Paging configures the page tokens of the list methods.
type Paging struct {
	// Secret is the HMAC-SHA256 key of page tokens, and the key from
	// which that of the passwords in idempotency fingerprints is derived:
	// 64 hex digits, the same on every replica. Empty means a random key
	// per process. It is a secret, so it is never printed.
	Secret string `yaml:"secret"`
}

// Webhooks configures the delivery of webhook events (docs/webhooks.md).
type Webhooks struct {
	// Timeout bounds one delivery attempt, connecting included.
	Timeout time.Duration `yaml:"timeout"`
	// MaxAttempts is the number of requests sent for one event before its
	// delivery is failed.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff spaces the attempts.
	Backoff Backoff `yaml:"backoff"`
	// PerEndpointConcurrency is the most attempts in flight to one endpoint
	// from every replica together.
	PerEndpointConcurrency int `yaml:"per_endpoint_concurrency"`
	// AllowPrivateNetworks lets endpoints point at addresses that are not
	// public and at any port (for development and tests).
	AllowPrivateNetworks bool `yaml:"allow_private_networks"`
	// MaxEndpoints is the most endpoints one API key may hold.
	MaxEndpoints int `yaml:"max_endpoints"`
	// SecretOverlap is how long the secret a rotation replaces still signs
	// deliveries, beside the new one; 0 stops it at once.
	SecretOverlap time.Duration `yaml:"secret_overlap"`
	// DatabaseMaxConns is the most connections of the pool of the webhook
	// queue and its workers, apart from database.max_conns.
	DatabaseMaxConns int32 `yaml:"database_max_conns"`
}

// Backoff is an exponential backoff with full jitter: the wait before retry
// n is uniform in [0, min(Max, Base·2^(n-1))].
type Backoff struct {
	// Base is the ceiling of the first wait.
	Base time.Duration `yaml:"base"`
	// Max caps the ceiling.
	Max time.Duration `yaml:"max"`
}

// AnonymousLimit returns the rate and burst of the bucket of anonymous
// calls: AnonymousRate and AnonymousBurst, each defaulting to the global
// one when 0.
func (l Limits) AnonymousLimit() (rate float64, burst int) {
	rate, burst = l.AnonymousRate, l.AnonymousBurst
	if rate == 0 {
		rate = l.Rate
	}
	if burst == 0 {
		burst = l.Burst
	}
	return rate, burst
}

// HTTPWriteTimeout returns the write timeout of http.addr: http.write_timeout,
// or when it is 0 the longest a business request runs (limits.timeout) plus
// 10 s to write its answer.
func (c Config) HTTPWriteTimeout() time.Duration {
	if c.HTTP.WriteTimeout > 0 {
		return c.HTTP.WriteTimeout
	}
	return c.Limits.Timeout + 10*time.Second
}

// Default returns the configuration used for every key that neither the
// file nor the environment sets. Database.URL has no default. Each call
// returns fresh slices, so callers may modify the result.
func Default() Config {
	return Config{
		HTTP: HTTP{
			Addr:                ":8080",
			MaxBodyBytes:        1 << 20,
			ReadHeaderTimeout:   10 * time.Second,
			ReadTimeout:         30 * time.Second,
			IdleTimeout:         2 * time.Minute,
			MaxConcurrentBodies: 64,
		},
		GRPC:     GRPC{Addr: ":9090", MaxConcurrentStreams: 256, MaxRecvBytes: 64 << 10, MaxOpenStreams: 1024, MaxConnectionIdle: 5 * time.Minute},
		Database: Database{MaxConns: 16, ReadMaxConns: 16, ReadMaxLag: time.Second},
		Limits: Limits{
			MaxInflight:   512,
			Timeout:       5 * time.Second,
			MinInflight:   8,
			LoginFailures: LoginFailures{Max: 10, Window: 15 * time.Minute},

			MaxConnections: 1024,
		},
		Auth:        Auth{Public: publicMethods()},
		Compression: Compression{MinBytes: 1024},
		Shutdown:    Shutdown{Timeout: 30 * time.Second},
		Log:         Log{Level: "info", Format: "json"},
		Idempotency: Idempotency{TTL: 24 * time.Hour},
		Webhooks: Webhooks{
			Timeout:                10 * time.Second,
			MaxAttempts:            20,
			Backoff:                Backoff{Base: time.Second, Max: time.Hour},
			PerEndpointConcurrency: 4,
			MaxEndpoints:           50,
			SecretOverlap:          24 * time.Hour,
			DatabaseMaxConns:       8,
		},
		Redis: Redis{Timeout: 20 * time.Millisecond, FallbackShare: 0.5},
		Hook: Hook{
			Protocol:     HookHTTP,
			Timeout:      100 * time.Millisecond,
			FailureMode:  HookFailClosed,
			SendBody:     true,
			CacheEntries: 10000,
		},
		Events: Events{
			Heartbeat:        15 * time.Second,
			MaxStreamsPerKey: 10,
			MaxStreams:       1000,
			MaxDuration:      25 * time.Minute,
			Buffer:           256,
			Retention:        7 * 24 * time.Hour,
		},
	}
}

// Error is the error returned by Load and Validate for every problem. Its
// text is one line: the key as written in the YAML, the environment
// variable in parentheses when the value came from the environment, and
// what is wrong, for example
//
//	limits.max_inflight (SHEBA_LIMITS_MAX_INFLIGHT): must be at least 1, got 0
//
// Key is empty for problems with the file as a whole (unreadable, not
// YAML), in which case Msg names the file.
type Error struct {
	// Key is the dotted YAML key, with an index for list elements
	// ("auth.keys[1].sha256").
	Key string
	// Env is the environment variable the value came from, if any.
	Env string
	// Msg says what is wrong.
	Msg string
}

// Error returns the one-line description of the problem.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Key != "" && e.Env != "":
		b.WriteString(e.Key + " (" + e.Env + "): ")
	case e.Key != "":
		b.WriteString(e.Key + ": ")
	case e.Env != "":
		b.WriteString(e.Env + ": ")
	}
	// The error must be one line on stderr, and some wrapped errors
	// (yaml's among them) span several.
	msg := strings.ReplaceAll(e.Msg, "\r", "")
	b.WriteString(strings.TrimSpace(strings.ReplaceAll(msg, "\n", " ")))
	return b.String()
}
