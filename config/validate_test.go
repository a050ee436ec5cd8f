package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	hash := func(c byte) string { return strings.Repeat(string(c), 64) }
	for _, test := range []struct {
		name    string
		change  func(*Config)
		wantKey string // "" means valid
		wantMsg string // a part of Error()
	}{
		// Valid configs.
		{name: "defaults with a URL", change: func(*Config) {}},
		{name: "key/value DSN", change: func(c *Config) { c.Database.URL = "host=localhost dbname=sheba user=sheba" }},
		{name: "both servers on port 0", change: func(c *Config) { c.HTTP.Addr, c.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0" }},
		{name: "rate with burst", change: func(c *Config) { c.Limits.Rate, c.Limits.Burst = 0.5, 1 }},
		{name: "per-key rate with burst", change: func(c *Config) { c.Limits.PerKeyRate, c.Limits.PerKeyBurst = 10, 10 }},
		{name: "anonymous rate with the global burst", change: func(c *Config) { c.Limits.Rate, c.Limits.Burst, c.Limits.AnonymousRate = 5, 5, 1 }},
		{
			name: "keys",
			change: func(c *Config) {
				c.Auth.Keys = []APIKey{{ID: "a", SHA256: hash('a')}, {ID: "b.c_d-9", SHA256: hash('0')}, {ID: strings.Repeat("x", 64), SHA256: hash('f')}}
			},
		},
		{name: "no public methods", change: func(c *Config) { c.Auth.Public = nil }},
		{name: "bodies of 64 MiB", change: func(c *Config) { c.HTTP.MaxBodyBytes = 64 << 20 }},
		{name: "adaptive", change: func(c *Config) { c.Limits.Adaptive, c.Limits.MinInflight, c.Limits.MaxInflight = true, 4, 4 }},
		{name: "min above max without adaptive", change: func(c *Config) { c.Limits.MinInflight, c.Limits.MaxInflight = 8, 2 }},
		{name: "login throttle off", change: func(c *Config) { c.Limits.LoginFailures.Max = 0 }},
		{name: "login ceiling of one key's", change: func(c *Config) { c.Limits.LoginFailures.MaxAll = 10 }},
		{name: "login throttle of one failure a second", change: func(c *Config) { c.Limits.LoginFailures = LoginFailures{Max: 1, Window: time.Second} }},
		{name: "redis", change: func(c *Config) {
			c.Redis.URL, c.Redis.Timeout = "redis://:secret@127.0.0.1:6379/1", 10*time.Millisecond
		}},
		{name: "redis fallback of the whole rate", change: func(c *Config) { c.Redis.FallbackShare = 1 }},
		{name: "http hook", change: func(c *Config) {
			c.Hook = Hook{URL: "http://127.0.0.1:9000/check", Protocol: HookHTTP, Timeout: time.Second, FailureMode: HookFailOpen,
				Methods: []string{"/sheba.v1.SubscriptionService/CreateSubscription"}, Headers: []string{"user-agent", "x-tenant"}}
		}},
		{name: "http hook on a unix socket", change: func(c *Config) { c.Hook.URL = "unix:///run/hook.sock" }},
		{name: "http hook over h2c", change: func(c *Config) { c.Hook.URL = "h2c://hook:9000/" }},
		{name: "https hook without a port", change: func(c *Config) { c.Hook.URL = "https://hook.example/check" }},
		{name: "ext_authz hook", change: func(c *Config) { c.Hook.URL, c.Hook.Protocol = "grpc://127.0.0.1:9001", HookExtAuthz }},
		{name: "tls", change: func(c *Config) { c.TLS = TLS{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key"} }},
		{name: "mtls", change: func(c *Config) {
			c.TLS = TLS{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key", ClientCAFile: "/tls/ca.crt"}
		}},
		{name: "operator port", change: func(c *Config) { c.Operator.Addr = ":8081" }},
		{name: "events at their bounds", change: func(c *Config) {
			c.Events = Events{Heartbeat: time.Second, MaxStreamsPerKey: 1, MaxStreams: 1, MaxDuration: 27*time.Minute - 1, Buffer: 1, Retention: time.Nanosecond}
		}},
		{name: "events at their other bounds", change: func(c *Config) {
			c.Events.Heartbeat, c.Events.MaxStreamsPerKey, c.Events.Buffer = time.Minute, c.Events.MaxStreams, 4096
		}},
		{name: "hook cache off", change: func(c *Config) { c.Hook.CacheEntries = 0 }},
		{name: "gRPC messages of 64 MiB", change: func(c *Config) { c.GRPC.MaxRecvBytes = 64 << 20 }},
		{name: "gRPC messages larger than REST bodies", change: func(c *Config) { c.HTTP.MaxBodyBytes, c.GRPC.MaxRecvBytes = 1024, 4096 }},
		{name: "drain delay inside timeout", change: func(c *Config) { c.Shutdown.DrainDelay, c.Shutdown.Timeout = 5*time.Second, 6*time.Second }},

		// One failing case per rule, in the order Validate checks them.
		{
			name:    "http.addr without port",
			change:  func(c *Config) { c.HTTP.Addr = "localhost" },
			wantKey: "http.addr",
			wantMsg: `http.addr: must be host:port such as ":8080" or "127.0.0.1:8080", got "localhost"`,
		},
		{
			name:    "http.addr bad port",
			change:  func(c *Config) { c.HTTP.Addr = ":70000" },
			wantKey: "http.addr",
			wantMsg: "port must be a number from 0 to 65535",
		},
		{
			name:    "http.max_body_bytes",
			change:  func(c *Config) { c.HTTP.MaxBodyBytes = 0 },
			wantKey: "http.max_body_bytes",
			wantMsg: "http.max_body_bytes: must be at least 1, got 0",
		},
		{
			name:    "http.max_body_bytes over 64 MiB",
			change:  func(c *Config) { c.HTTP.MaxBodyBytes = 64<<20 + 1 },
			wantKey: "http.max_body_bytes",
			wantMsg: "http.max_body_bytes: must be at most 67108864 (64 MiB), got 67108865",
		},
		{
			name:    "http.max_body_bytes near MaxInt64",
			change:  func(c *Config) { c.HTTP.MaxBodyBytes = math.MaxInt64 },
			wantKey: "http.max_body_bytes",
			wantMsg: "http.max_body_bytes: must be at most 67108864 (64 MiB), got 9223372036854775807",
		},
		{
			name:    "http.read_header_timeout",
			change:  func(c *Config) { c.HTTP.ReadHeaderTimeout = 0 },
			wantKey: "http.read_header_timeout",
			wantMsg: "http.read_header_timeout: must be greater than 0, got 0s",
		},
		{
			name:    "http.read_timeout",
			change:  func(c *Config) { c.HTTP.ReadTimeout = -time.Second },
			wantKey: "http.read_timeout",
			wantMsg: "http.read_timeout: must be greater than 0, got -1s",
		},
		{
			name:    "http.read_timeout shorter than the header timeout",
			change:  func(c *Config) { c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout = 5*time.Second, 2*time.Second },
			wantKey: "http.read_timeout",
			wantMsg: "http.read_timeout: must be at least http.read_header_timeout (5s), which it includes; got 2s",
		},
		{
			name:    "http.idle_timeout",
			change:  func(c *Config) { c.HTTP.IdleTimeout = 0 },
			wantKey: "http.idle_timeout",
			wantMsg: "http.idle_timeout: must be greater than 0, got 0s",
		},
		{
			name:    "http.write_timeout",
			change:  func(c *Config) { c.HTTP.WriteTimeout = -time.Second },
			wantKey: "http.write_timeout",
			wantMsg: "http.write_timeout: must be at least 0 (0 means limits.timeout + 10s), got -1s",
		},
		{
			name:    "http.cors.allowed_origins with a path",
			change:  func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"*", "https://app.example.com/"} },
			wantKey: "http.cors.allowed_origins[1]",
			wantMsg: `http.cors.allowed_origins[1]: must be "*" or an origin such as "https://app.example.com"`,
		},
		{
			name:    "http.cors.allowed_origins without a scheme",
			change:  func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"app.example.com"} },
			wantKey: "http.cors.allowed_origins[0]",
			wantMsg: `http.cors.allowed_origins[0]: must be "*" or an origin`,
		},
		{
			name:    "http.cors.allowed_origins with another scheme",
			change:  func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"ftp://app.example.com"} },
			wantKey: "http.cors.allowed_origins[0]",
			wantMsg: `http.cors.allowed_origins[0]: must be "*" or an origin`,
		},
		{
			name:    "http.cors.allowed_origins null",
			change:  func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"null"} },
			wantKey: "http.cors.allowed_origins[0]",
			wantMsg: `http.cors.allowed_origins[0]: must be "*" or an origin`,
		},
		{
			name:    "http.cors.allowed_origins with a partial wildcard",
			change:  func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"https://*.example.com"} },
			wantKey: "http.cors.allowed_origins[0]",
			wantMsg: `http.cors.allowed_origins[0]: a wildcard is allowed only as the whole entry "*"`,
		},
		{
			name:    "http.cors.allowed_origins in capitals",
			change:  func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"https://App.example.com"} },
			wantKey: "http.cors.allowed_origins[0]",
			wantMsg: `http.cors.allowed_origins[0]: must be in lowercase`,
		},
		{
			name:    "http.cors.allowed_origins with the default port",
			change:  func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"https://app.example.com:443"} },
			wantKey: "http.cors.allowed_origins[0]",
			wantMsg: `http.cors.allowed_origins[0]: browsers send the origin without the scheme's default port: write "https://app.example.com"`,
		},
		{
			name:    "http.max_concurrent_bodies",
			change:  func(c *Config) { c.HTTP.MaxConcurrentBodies = 0 },
			wantKey: "http.max_concurrent_bodies",
			wantMsg: "http.max_concurrent_bodies: must be at least 1, got 0",
		},
		{
			name:    "grpc.addr",
			change:  func(c *Config) { c.GRPC.Addr = "" },
			wantKey: "grpc.addr",
			wantMsg: "grpc.addr: must be host:port",
		},
		{
			name:    "grpc.addr same as http.addr",
			change:  func(c *Config) { c.GRPC.Addr = ":8080" },
			wantKey: "grpc.addr",
			wantMsg: `grpc.addr: must differ from http.addr, both are ":8080"`,
		},
		{
			name:    "grpc.max_concurrent_streams",
			change:  func(c *Config) { c.GRPC.MaxConcurrentStreams = 0 },
			wantKey: "grpc.max_concurrent_streams",
			wantMsg: "grpc.max_concurrent_streams: must be at least 1, got 0",
		},
		{
			name:    "grpc.max_recv_bytes zero",
			change:  func(c *Config) { c.GRPC.MaxRecvBytes = 0 },
			wantKey: "grpc.max_recv_bytes",
			wantMsg: "grpc.max_recv_bytes: must be from 1 to 67108864 (64 MiB), got 0",
		},
		{
			name:    "grpc.max_recv_bytes over 64 MiB",
			change:  func(c *Config) { c.GRPC.MaxRecvBytes = 64<<20 + 1 },
			wantKey: "grpc.max_recv_bytes",
			wantMsg: "grpc.max_recv_bytes: must be from 1 to 67108864 (64 MiB), got 67108865",
		},
		{
			name:    "grpc.max_open_streams",
			change:  func(c *Config) { c.GRPC.MaxOpenStreams = 0 },
			wantKey: "grpc.max_open_streams",
			wantMsg: "grpc.max_open_streams: must be at least 1, got 0",
		},
		{
			name:    "grpc.max_connection_idle",
			change:  func(c *Config) { c.GRPC.MaxConnectionIdle = 0 },
			wantKey: "grpc.max_connection_idle",
			wantMsg: "grpc.max_connection_idle: must be greater than 0, got 0s",
		},
		{
			name:    "database.url empty",
			change:  func(c *Config) { c.Database.URL = "" },
			wantKey: "database.url",
			wantMsg: "database.url: must be set: set DATABASE_URL",
		},
		{
			name:    "database.url unparsable URL",
			change:  func(c *Config) { c.Database.URL = "postgres://u:hunter2@localhost:notaport/db" },
			wantKey: "database.url",
			wantMsg: "database.url: must be a postgres URL",
		},
		{
			name:    "database.url unparsable DSN",
			change:  func(c *Config) { c.Database.URL = "host=localhost password='hunter2" },
			wantKey: "database.url",
			wantMsg: "database.url: must be a postgres URL",
		},
		{
			name:    "database.url several hosts without target_session_attrs",
			change:  func(c *Config) { c.Database.URL = "postgres://u:hunter2@h1:5432,h2:5432/sheba" },
			wantKey: "database.url",
			wantMsg: "database.url: names several hosts, so it must say target_session_attrs=read-write",
		},
		{
			name: "database.url several hosts with target_session_attrs=primary",
			change: func(c *Config) {
				c.Database.URL = "postgres://u:hunter2@h1:5432,h2:5432/sheba?target_session_attrs=primary"
			},
			wantKey: "database.url",
			wantMsg: "database.url: names several hosts, so it must say target_session_attrs=read-write",
		},
		{
			name:    "database.url several hosts as a key/value string without target_session_attrs",
			change:  func(c *Config) { c.Database.URL = "host=h1,h2 port=5432,5433 dbname=sheba" },
			wantKey: "database.url",
			wantMsg: "database.url: names several hosts, so it must say target_session_attrs=read-write",
		},
		{
			name:    "database.read_url unparsable",
			change:  func(c *Config) { c.Database.ReadURL = "postgres://u:hunter2@localhost:notaport/db" },
			wantKey: "database.read_url",
			wantMsg: "database.read_url: must be a postgres URL",
		},
		{
			name:    "database.read_max_conns",
			change:  func(c *Config) { c.Database.ReadMaxConns = 0 },
			wantKey: "database.read_max_conns",
			wantMsg: "database.read_max_conns: must be at least 1, got 0",
		},
		{
			name:    "database.read_max_lag",
			change:  func(c *Config) { c.Database.ReadMaxLag = 0 },
			wantKey: "database.read_max_lag",
			wantMsg: "database.read_max_lag: must be greater than 0, got 0s",
		},
		{
			name:    "database.max_conns",
			change:  func(c *Config) { c.Database.MaxConns = 0 },
			wantKey: "database.max_conns",
			wantMsg: "database.max_conns: must be at least 1, got 0",
		},
		{
			name:    "limits.max_inflight",
			change:  func(c *Config) { c.Limits.MaxInflight = 0 },
			wantKey: "limits.max_inflight",
			wantMsg: "limits.max_inflight: must be at least 1, got 0",
		},
		{
			name:    "limits.max_connections",
			change:  func(c *Config) { c.Limits.MaxConnections = 0 },
			wantKey: "limits.max_connections",
			wantMsg: "limits.max_connections: must be at least 1, got 0",
		},
		{
			name:    "limits.rate negative",
			change:  func(c *Config) { c.Limits.Rate = -1 },
			wantKey: "limits.rate",
			wantMsg: "limits.rate: must be at least 0 (0 means no limit), got -1",
		},
		{
			name:    "limits.rate NaN",
			change:  func(c *Config) { c.Limits.Rate = math.NaN() },
			wantKey: "limits.rate",
			wantMsg: "must be a finite number",
		},
		{
			name:    "limits.rate infinite",
			change:  func(c *Config) { c.Limits.Rate, c.Limits.Burst = math.Inf(1), 1 },
			wantKey: "limits.rate",
			wantMsg: "must be a finite number",
		},
		{
			name:    "limits.burst negative",
			change:  func(c *Config) { c.Limits.Burst = -1 },
			wantKey: "limits.burst",
			wantMsg: "limits.burst: must be at least 0, got -1",
		},
		{
			name:    "limits.burst zero with a rate",
			change:  func(c *Config) { c.Limits.Rate = 10 },
			wantKey: "limits.burst",
			wantMsg: "limits.burst: must be at least 1 when limits.rate is above 0 (it is 10), got 0",
		},
		{
			name:    "limits.per_key_rate",
			change:  func(c *Config) { c.Limits.PerKeyRate = -0.5 },
			wantKey: "limits.per_key_rate",
			wantMsg: "limits.per_key_rate: must be at least 0",
		},
		{
			name:    "limits.per_key_burst negative",
			change:  func(c *Config) { c.Limits.PerKeyBurst = -3 },
			wantKey: "limits.per_key_burst",
			wantMsg: "limits.per_key_burst: must be at least 0, got -3",
		},
		{
			name:    "limits.per_key_burst zero with a rate",
			change:  func(c *Config) { c.Limits.PerKeyRate = 1 },
			wantKey: "limits.per_key_burst",
			wantMsg: "when limits.per_key_rate is above 0",
		},
		{
			name:    "limits.anonymous_rate",
			change:  func(c *Config) { c.Limits.AnonymousRate = -1 },
			wantKey: "limits.anonymous_rate",
			wantMsg: "limits.anonymous_rate: must be a finite number, at least 0 (0 means the same as limits.rate), got -1",
		},
		{
			name:    "limits.anonymous_burst negative",
			change:  func(c *Config) { c.Limits.AnonymousBurst = -2 },
			wantKey: "limits.anonymous_burst",
			wantMsg: "limits.anonymous_burst: must be at least 0 (0 means the same as limits.burst), got -2",
		},
		{
			name:    "limits.anonymous_burst missing with an anonymous rate",
			change:  func(c *Config) { c.Limits.AnonymousRate = 3 },
			wantKey: "limits.anonymous_burst",
			wantMsg: "must be at least 1 when the anonymous rate is above 0 (it is 3)",
		},
		{
			name:    "limits.timeout",
			change:  func(c *Config) { c.Limits.Timeout = 0 },
			wantKey: "limits.timeout",
			wantMsg: "limits.timeout: must be greater than 0, got 0s",
		},
		{
			name:    "limits.min_inflight",
			change:  func(c *Config) { c.Limits.MinInflight = 0 },
			wantKey: "limits.min_inflight",
			wantMsg: "limits.min_inflight: must be at least 1, got 0",
		},
		{
			name:    "limits.min_inflight above max",
			change:  func(c *Config) { c.Limits.Adaptive, c.Limits.MinInflight, c.Limits.MaxInflight = true, 10, 5 },
			wantKey: "limits.min_inflight",
			wantMsg: "limits.min_inflight: must be at most limits.max_inflight (5) when limits.adaptive is true, got 10",
		},
		{
			name:    "limits.login_failures.max",
			change:  func(c *Config) { c.Limits.LoginFailures.Max = -1 },
			wantKey: "limits.login_failures.max",
			wantMsg: "limits.login_failures.max: must be at least 0 (0 turns the login throttle off), got -1",
		},
		{
			name:    "limits.login_failures.max_all negative",
			change:  func(c *Config) { c.Limits.LoginFailures.MaxAll = -1 },
			wantKey: "limits.login_failures.max_all",
			wantMsg: "limits.login_failures.max_all: must be 0 (10 × limits.login_failures.max) or at least limits.login_failures.max (10), got -1",
		},
		{
			name:    "limits.login_failures.max_all below max",
			change:  func(c *Config) { c.Limits.LoginFailures.MaxAll = 9 },
			wantKey: "limits.login_failures.max_all",
			wantMsg: "limits.login_failures.max_all: must be 0 (10 × limits.login_failures.max) or at least limits.login_failures.max (10), got 9",
		},
		{
			name:    "limits.login_failures.window",
			change:  func(c *Config) { c.Limits.LoginFailures.Window = 500 * time.Millisecond },
			wantKey: "limits.login_failures.window",
			wantMsg: "limits.login_failures.window: must be at least 1s, got 500ms",
		},
		{
			name:    "auth.keys id empty",
			change:  func(c *Config) { c.Auth.Keys = []APIKey{{SHA256: hash('a')}} },
			wantKey: "auth.keys[0].id",
			wantMsg: "auth.keys[0].id: must be set",
		},
		{
			name:    "auth.keys id bad characters",
			change:  func(c *Config) { c.Auth.Keys = []APIKey{{ID: "Billing", SHA256: hash('a')}} },
			wantKey: "auth.keys[0].id",
			wantMsg: `must be 1 to 64 of a-z 0-9 . _ - starting with a letter or digit, got "Billing"`,
		},
		{
			name:    "auth.keys id leading dash",
			change:  func(c *Config) { c.Auth.Keys = []APIKey{{ID: "-x", SHA256: hash('a')}} },
			wantKey: "auth.keys[0].id",
			wantMsg: "must be 1 to 64",
		},
		{
			name:    "auth.keys id too long",
			change:  func(c *Config) { c.Auth.Keys = []APIKey{{ID: strings.Repeat("x", 65), SHA256: hash('a')}} },
			wantKey: "auth.keys[0].id",
			wantMsg: "must be 1 to 64",
		},
		{
			name: "auth.keys id repeated",
			change: func(c *Config) {
				c.Auth.Keys = []APIKey{{ID: "a", SHA256: hash('a')}, {ID: "a", SHA256: hash('b')}}
			},
			wantKey: "auth.keys[1].id",
			wantMsg: `auth.keys[1].id: "a" is already the id of auth.keys[0]`,
		},
		{
			name:    "auth.keys sha256 too short",
			change:  func(c *Config) { c.Auth.Keys = []APIKey{{ID: "a", SHA256: "abc123"}} },
			wantKey: "auth.keys[0].sha256",
			wantMsg: "auth.keys[0].sha256: must be exactly 64 lowercase hex digits (the SHA-256 of the key, as `sheba apikey new` prints it), got 6 characters",
		},
		{
			name:    "auth.keys sha256 uppercase",
			change:  func(c *Config) { c.Auth.Keys = []APIKey{{ID: "a", SHA256: hash('A')}} },
			wantKey: "auth.keys[0].sha256",
			wantMsg: "must be exactly 64 lowercase hex digits",
		},
		{
			name:    "auth.keys sha256 not hex",
			change:  func(c *Config) { c.Auth.Keys = []APIKey{{ID: "a", SHA256: hash('g')}} },
			wantKey: "auth.keys[0].sha256",
			wantMsg: "must be exactly 64 lowercase hex digits",
		},
		{
			name: "auth.keys sha256 repeated",
			change: func(c *Config) {
				c.Auth.Keys = []APIKey{{ID: "a", SHA256: hash('a')}, {ID: "b", SHA256: hash('c')}, {ID: "c", SHA256: hash('a')}}
			},
			wantKey: "auth.keys[2].sha256",
			wantMsg: `auth.keys[2].sha256: is the same hash as auth.keys[0] ("a")`,
		},
		{
			name:    "auth.public REST path",
			change:  func(c *Config) { c.Auth.Public = []string{"/sheba.v1.PingService/Ping", "/v1/ping"} },
			wantKey: "auth.public[1]",
			wantMsg: `auth.public[1]: must be a full gRPC method name such as "/sheba.v1.PingService/Ping", got "/v1/ping"`,
		},
		{
			name:    "auth.public without leading slash",
			change:  func(c *Config) { c.Auth.Public = []string{"sheba.v1.PingService/Ping"} },
			wantKey: "auth.public[0]",
			wantMsg: "must be a full gRPC method name",
		},
		{
			name:    "auth.public without method",
			change:  func(c *Config) { c.Auth.Public = []string{"/sheba.v1.PingService/"} },
			wantKey: "auth.public[0]",
			wantMsg: "must be a full gRPC method name",
		},
		{
			name:    "auth.public with extra part",
			change:  func(c *Config) { c.Auth.Public = []string{"/sheba.v1.PingService/Ping/x"} },
			wantKey: "auth.public[0]",
			wantMsg: "must be a full gRPC method name",
		},
		{
			name: "auth.public method that is none",
			change: func(c *Config) {
				c.Auth.Public = []string{"/sheba.v1.PingService/Ping", "/sheba.v1.PingService/NoSuchMethod"}
			},
			wantKey: "auth.public[1]",
			wantMsg: `auth.public[1]: "/sheba.v1.PingService/NoSuchMethod" is not a method of sheba (docs/api.md)`,
		},
		{
			name:    "auth.public health",
			change:  func(c *Config) { c.Auth.Public = []string{"/grpc.health.v1.Health/Check"} },
			wantKey: "auth.public[0]",
			wantMsg: `"/grpc.health.v1.Health/Check" is not a method of sheba`,
		},
		{
			name:    "compression.min_bytes",
			change:  func(c *Config) { c.Compression.MinBytes = -1 },
			wantKey: "compression.min_bytes",
			wantMsg: "compression.min_bytes: must be at least 0, got -1",
		},
		{
			name:    "shutdown.drain_delay",
			change:  func(c *Config) { c.Shutdown.DrainDelay = -time.Second },
			wantKey: "shutdown.drain_delay",
			wantMsg: "shutdown.drain_delay: must be at least 0s, got -1s",
		},
		{
			name:    "shutdown.timeout",
			change:  func(c *Config) { c.Shutdown.Timeout = 0 },
			wantKey: "shutdown.timeout",
			wantMsg: "shutdown.timeout: must be greater than 0, got 0s",
		},
		{
			name:    "shutdown.timeout not above drain_delay",
			change:  func(c *Config) { c.Shutdown.DrainDelay, c.Shutdown.Timeout = 30*time.Second, 30*time.Second },
			wantKey: "shutdown.timeout",
			wantMsg: "shutdown.timeout: must be longer than shutdown.drain_delay (30s), which it includes; got 30s",
		},
		{
			name:    "log.level",
			change:  func(c *Config) { c.Log.Level = "INFO" },
			wantKey: "log.level",
			wantMsg: `log.level: must be one of debug, info, warn, error; got "INFO"`,
		},
		{
			name:    "log.format",
			change:  func(c *Config) { c.Log.Format = "logfmt" },
			wantKey: "log.format",
			wantMsg: `log.format: must be one of json, text; got "logfmt"`,
		},
		{
			name:    "idempotency.ttl",
			change:  func(c *Config) { c.Idempotency.TTL = 500 * time.Millisecond },
			wantKey: "idempotency.ttl",
			wantMsg: "idempotency.ttl: must be at least 1s, got 500ms",
		},
		{
			name:   "idempotency.ttl of 1s",
			change: func(c *Config) { c.Idempotency.TTL = time.Second },
		},
		{
			name:   "paging.secret set",
			change: func(c *Config) { c.Paging.Secret = strings.Repeat("0f", 32) },
		},
		{
			name:    "paging.secret not hex",
			change:  func(c *Config) { c.Paging.Secret = "hunter2" + strings.Repeat("z", 57) },
			wantKey: "paging.secret",
			wantMsg: "paging.secret: must be exactly 64 hex digits (32 random bytes, e.g. from `openssl rand -hex 32`), got 64 characters",
		},
		{
			name:    "paging.secret too short",
			change:  func(c *Config) { c.Paging.Secret = "hunter2" + hash('A')[:20] },
			wantKey: "paging.secret",
			wantMsg: "paging.secret: must be exactly 64 hex digits",
		},
		{
			name:    "webhooks.timeout",
			change:  func(c *Config) { c.Webhooks.Timeout = 0 },
			wantKey: "webhooks.timeout",
			wantMsg: "webhooks.timeout: must be greater than 0, got 0s",
		},
		{
			name:    "webhooks.max_attempts",
			change:  func(c *Config) { c.Webhooks.MaxAttempts = 0 },
			wantKey: "webhooks.max_attempts",
			wantMsg: "webhooks.max_attempts: must be at least 1, got 0",
		},
		{
			name:    "webhooks.backoff.base",
			change:  func(c *Config) { c.Webhooks.Backoff.Base = -time.Second },
			wantKey: "webhooks.backoff.base",
			wantMsg: "webhooks.backoff.base: must be greater than 0, got -1s",
		},
		{
			name:    "webhooks.backoff.max below base",
			change:  func(c *Config) { c.Webhooks.Backoff.Base, c.Webhooks.Backoff.Max = time.Minute, time.Second },
			wantKey: "webhooks.backoff.max",
			wantMsg: "webhooks.backoff.max: must be at least webhooks.backoff.base (1m0s), got 1s",
		},
		{
			name:    "webhooks.per_endpoint_concurrency",
			change:  func(c *Config) { c.Webhooks.PerEndpointConcurrency = 0 },
			wantKey: "webhooks.per_endpoint_concurrency",
			wantMsg: "webhooks.per_endpoint_concurrency: must be at least 1, got 0",
		},
		{
			name:    "webhooks.max_endpoints",
			change:  func(c *Config) { c.Webhooks.MaxEndpoints = 0 },
			wantKey: "webhooks.max_endpoints",
			wantMsg: "webhooks.max_endpoints: must be at least 1, got 0",
		},
		{
			name:    "webhooks.secret_overlap",
			change:  func(c *Config) { c.Webhooks.SecretOverlap = -time.Second },
			wantKey: "webhooks.secret_overlap",
			wantMsg: "webhooks.secret_overlap: must be at least 0 (0 stops the replaced secret at once), got -1s",
		},
		{
			name:    "webhooks.database_max_conns",
			change:  func(c *Config) { c.Webhooks.DatabaseMaxConns = 3 },
			wantKey: "webhooks.database_max_conns",
			wantMsg: "webhooks.database_max_conns: must be at least 4, got 3",
		},
		{
			name:    "redis.url",
			change:  func(c *Config) { c.Redis.URL = "http://:hunter2@cache:6379" },
			wantKey: "redis.url",
			wantMsg: "redis.url: must be empty (limits per process) or a redis:// or rediss:// URL",
		},
		{
			name:    "redis.timeout",
			change:  func(c *Config) { c.Redis.Timeout = 0 },
			wantKey: "redis.timeout",
			wantMsg: "redis.timeout: must be greater than 0 and at most 1s",
		},
		{
			name:    "redis.fallback_share 0",
			change:  func(c *Config) { c.Redis.FallbackShare = 0 },
			wantKey: "redis.fallback_share",
			wantMsg: "redis.fallback_share: must be above 0 and at most 1 (the share of each rate a replica admits alone while Redis is out), got 0",
		},
		{
			name:    "redis.fallback_share above 1",
			change:  func(c *Config) { c.Redis.FallbackShare = 1.5 },
			wantKey: "redis.fallback_share",
			wantMsg: "redis.fallback_share: must be above 0 and at most 1 (the share of each rate a replica admits alone while Redis is out), got 1.5",
		},
		{
			name:    "redis.fallback_share NaN",
			change:  func(c *Config) { c.Redis.FallbackShare = math.NaN() },
			wantKey: "redis.fallback_share",
			wantMsg: "redis.fallback_share: must be above 0 and at most 1",
		},

		{
			name:    "hook.protocol",
			change:  func(c *Config) { c.Hook.Protocol = "grpc" },
			wantKey: "hook.protocol",
			wantMsg: `hook.protocol: must be one of http, ext_authz; got "grpc"`,
		},
		{
			name:    "hook.url of another protocol",
			change:  func(c *Config) { c.Hook.URL = "grpc://127.0.0.1:9001" },
			wantKey: "hook.url",
			wantMsg: `hook.url: must be a URL of scheme http, https, h2c, unix for protocol http, got "grpc://127.0.0.1:9001"`,
		},
		{
			name:    "hook.url of http for ext_authz",
			change:  func(c *Config) { c.Hook.URL, c.Hook.Protocol = "http://127.0.0.1:9001", HookExtAuthz },
			wantKey: "hook.url",
			wantMsg: "hook.url: must be a URL of scheme grpc, unix for protocol ext_authz",
		},
		{
			name:    "hook.url of a relative socket",
			change:  func(c *Config) { c.Hook.URL = "unix://hook.sock" },
			wantKey: "hook.url",
			wantMsg: "hook.url: must name a socket by its absolute path",
		},
		{
			name:    "hook.url without a port",
			change:  func(c *Config) { c.Hook.URL, c.Hook.Protocol = "grpc://authz", HookExtAuthz },
			wantKey: "hook.url",
			wantMsg: "hook.url: must name a host and port",
		},
		{
			name:    "hook.url of ext_authz with a path",
			change:  func(c *Config) { c.Hook.URL, c.Hook.Protocol = "grpc://127.0.0.1:9001/check", HookExtAuthz },
			wantKey: "hook.url",
			wantMsg: "hook.url: must be grpc://host:port, with no path",
		},
		{
			name:    "hook.methods",
			change:  func(c *Config) { c.Hook.Methods = []string{"CreateSubscription"} },
			wantKey: "hook.methods[0]",
			wantMsg: `hook.methods[0]: must be a full gRPC method name`,
		},
		{
			name: "hook.methods method that is none",
			change: func(c *Config) {
				c.Hook.Methods = []string{"/sheba.v1.PingService/Ping", "/sheba.v1.SubscriptionService/CreateSubscriptions"}
			},
			wantKey: "hook.methods[1]",
			wantMsg: `hook.methods[1]: "/sheba.v1.SubscriptionService/CreateSubscriptions" is not a method of sheba (docs/api.md)`,
		},
		{
			name:    "hook.timeout",
			change:  func(c *Config) { c.Hook.Timeout = 0 },
			wantKey: "hook.timeout",
			wantMsg: "hook.timeout: must be greater than 0",
		},
		{
			name:    "hook.failure_mode",
			change:  func(c *Config) { c.Hook.FailureMode = "fail" },
			wantKey: "hook.failure_mode",
			wantMsg: `hook.failure_mode: must be one of closed, open; got "fail"`,
		},
		{
			name:    "hook.headers with the key",
			change:  func(c *Config) { c.Hook.Headers = []string{"user-agent", "x-api-key"} },
			wantKey: "hook.headers[1]",
			wantMsg: `hook.headers[1]: "x-api-key" carries the API key, which the hook never sees`,
		},
		{
			name:    "hook.headers in capitals",
			change:  func(c *Config) { c.Hook.Headers = []string{"User-Agent"} },
			wantKey: "hook.headers[0]",
			wantMsg: `hook.headers[0]: must be a header name in lowercase`,
		},
		{
			name:    "hook.cache_entries",
			change:  func(c *Config) { c.Hook.CacheEntries = -1 },
			wantKey: "hook.cache_entries",
			wantMsg: "hook.cache_entries: must be at least 0, got -1",
		},

		{
			name:    "tls.key_file missing",
			change:  func(c *Config) { c.TLS.CertFile = "/tls/tls.crt" },
			wantKey: "tls.key_file",
			wantMsg: "tls.key_file: must be set with tls.cert_file",
		},
		{
			name:    "tls.cert_file missing",
			change:  func(c *Config) { c.TLS.KeyFile = "/tls/tls.key" },
			wantKey: "tls.cert_file",
			wantMsg: "tls.cert_file: must be set with tls.key_file",
		},
		{
			name:    "tls.client_ca_file without a certificate",
			change:  func(c *Config) { c.TLS.ClientCAFile = "/tls/ca.crt" },
			wantKey: "tls.client_ca_file",
			wantMsg: "tls.client_ca_file: needs tls.cert_file and tls.key_file",
		},
		{
			name:    "operator.addr",
			change:  func(c *Config) { c.Operator.Addr = "8081" },
			wantKey: "operator.addr",
		},
		{
			name:    "operator.addr on http.addr",
			change:  func(c *Config) { c.Operator.Addr = ":8080" },
			wantKey: "operator.addr",
			wantMsg: "operator.addr: must differ from http.addr (:8080)",
		},
		{
			name:    "events.heartbeat below 1s",
			change:  func(c *Config) { c.Events.Heartbeat = 999 * time.Millisecond },
			wantKey: "events.heartbeat",
			wantMsg: "events.heartbeat: must be from 1s to 1m0s, got 999ms",
		},
		{
			name:    "events.heartbeat above 60s",
			change:  func(c *Config) { c.Events.Heartbeat = time.Minute + time.Second },
			wantKey: "events.heartbeat",
			wantMsg: "must be from 1s to 1m0s, got 1m1s",
		},
		{
			name:    "events.max_streams_per_key 0",
			change:  func(c *Config) { c.Events.MaxStreamsPerKey = 0 },
			wantKey: "events.max_streams_per_key",
			wantMsg: "must be at least 1, got 0",
		},
		{
			name:    "events.max_streams 0",
			change:  func(c *Config) { c.Events.MaxStreams, c.Events.MaxStreamsPerKey = 0, 0 },
			wantKey: "events.max_streams_per_key",
		},
		{
			name:    "events.max_streams below its per-key bound",
			change:  func(c *Config) { c.Events.MaxStreams = 5 },
			wantKey: "events.max_streams_per_key",
			wantMsg: "events.max_streams_per_key: must be at most events.max_streams (5), got 10",
		},
		{
			name:    "events.max_duration at the connection age less its jitter",
			change:  func(c *Config) { c.Events.MaxDuration = 27 * time.Minute },
			wantKey: "events.max_duration",
			wantMsg: "must be greater than 0 and below 27m0s (the gRPC connection age, 30m0s, less its 10% jitter",
		},
		{
			name:    "events.max_duration 0",
			change:  func(c *Config) { c.Events.MaxDuration = 0 },
			wantKey: "events.max_duration",
		},
		{
			name:    "events.buffer 0",
			change:  func(c *Config) { c.Events.Buffer = 0 },
			wantKey: "events.buffer",
			wantMsg: "must be from 1 to 4096, got 0",
		},
		{
			name:    "events.buffer too large",
			change:  func(c *Config) { c.Events.Buffer = 4097 },
			wantKey: "events.buffer",
		},
		{
			name:    "events.retention 0",
			change:  func(c *Config) { c.Events.Retention = 0 },
			wantKey: "events.retention",
			wantMsg: "must be greater than 0, got 0s",
		},

		// Several problems: the first in YAML order wins.
		{
			name: "first problem in order",
			change: func(c *Config) {
				c.Log.Format = "xml"
				c.Limits.MaxInflight = 0
				c.Database.MaxConns = 0
			},
			wantKey: "database.max_conns",
			wantMsg: "database.max_conns:",
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := valid()
			test.change(&c)
			err := c.Validate()
			if test.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", test.wantMsg)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Validate() error %v (%T) is not an *Error", err, err)
			}
			if e.Key != test.wantKey || e.Env != "" {
				t.Errorf("Validate() error Key, Env = %q, %q, want %q, \"\"", e.Key, e.Env, test.wantKey)
			}
			msg := err.Error()
			if !strings.Contains(msg, test.wantMsg) {
				t.Errorf("Validate() = %q, want it to contain %q", msg, test.wantMsg)
			}
			for _, secret := range []string{"hunter2", hash('A'), hash('g')} {
				if strings.Contains(msg, secret) {
					t.Errorf("Validate() = %q, want it not to quote %q", msg, secret)
				}
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	const secret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	for _, test := range []struct {
		name   string
		change func(*Config)
		want   []string // a part of each warning, in order
	}{
		{"defaults with a paging secret", func(*Config) {}, nil},
		{"shutdown just longer than drain and deadline", func(c *Config) {
			c.Shutdown.DrainDelay, c.Shutdown.Timeout, c.Limits.Timeout = 10*time.Second, 15*time.Second+time.Millisecond, 5*time.Second
		}, nil},
		{"shutdown equal to drain and deadline", func(c *Config) {
			c.Shutdown.DrainDelay, c.Shutdown.Timeout, c.Limits.Timeout = 10*time.Second, 15*time.Second, 5*time.Second
		}, []string{"shutdown.timeout (15s) is not longer than shutdown.drain_delay (10s) + limits.timeout (5s): requests in flight at shutdown may be cut"}},
		{"shutdown shorter than the deadline alone", func(c *Config) {
			c.Shutdown.Timeout, c.Limits.Timeout = 2*time.Second, 5*time.Second
		}, []string{"shutdown.timeout (2s) is not longer than shutdown.drain_delay (0s) + limits.timeout (5s)"}},
		{"no paging secret", func(c *Config) { c.Paging.Secret = "" }, []string{"paging.secret is not set"}},
		{"auth.public as the protos say", func(c *Config) { c.Auth.Public = publicMethods() }, nil},
		{"auth.public makes a keyed method public", func(c *Config) {
			c.Auth.Public = append(publicMethods(), "/sheba.v1.AccountService/Login", "/sheba.v1.AccountService/CreateAccount")
		}, []string{"auth.public makes public /sheba.v1.AccountService/CreateAccount, /sheba.v1.AccountService/Login, which need a key by the API's policy (docs/api.md#authentication)"}},
		{"auth.public keys a public method", func(c *Config) { c.Auth.Public = []string{} },
			[]string{"auth.public makes " + strings.Join(publicMethods(), ", ") + " need a key, public by the API's policy (docs/api.md#authentication)"}},
		{"auth.public both", func(c *Config) { c.Auth.Public = []string{"/sheba.v1.AccountService/GetAccount"} },
			[]string{"auth.public makes public /sheba.v1.AccountService/GetAccount, which need a key by the API's policy; and makes " + strings.Join(publicMethods(), ", ") + " need a key"}},
	} {
		t.Run(test.name, func(t *testing.T) {
			c := Default()
			c.Database.URL = "postgres://sheba@localhost/sheba"
			c.Paging.Secret = secret
			test.change(&c)
			if err := c.Validate(); err != nil {
				t.Fatalf("config not valid: %v", err)
			}
			got := c.Warnings()
			if len(got) != len(test.want) {
				t.Fatalf("got warnings %q, want %d", got, len(test.want))
			}
			for i, w := range test.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d: got %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}
