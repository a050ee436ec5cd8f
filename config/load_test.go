package config

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testKey is a valid API key entry.
var testKey = APIKey{ID: "billing-svc", SHA256: strings.Repeat("ab", 32)}

// configKey is one key of the config with the variable that overrides it.
type configKey struct {
	key, env string
}

// allKeys lists every key of Config in order, as the code derives them.
func allKeys() []configKey {
	var keys []configKey
	c := Default()
	_ = walkKeys(reflect.ValueOf(&c).Elem(), nil, func(path []string, _ reflect.Value) error {
		keys = append(keys, configKey{strings.Join(path, "."), "SHEBA_" + strings.ToUpper(strings.Join(path, "_"))})
		return nil
	})
	return keys
}

// TestEnvNames pins the variable names Load consults, so a renamed field
// cannot silently rename a variable operators rely on.
func TestEnvNames(t *testing.T) {
	want := []string{
		"SHEBA_HTTP_ADDR",
		"SHEBA_HTTP_MAX_BODY_BYTES",
		"SHEBA_HTTP_READ_HEADER_TIMEOUT",
		"SHEBA_HTTP_READ_TIMEOUT",
		"SHEBA_HTTP_IDLE_TIMEOUT",
		"SHEBA_HTTP_WRITE_TIMEOUT",
		"SHEBA_HTTP_MAX_CONCURRENT_BODIES",
		"SHEBA_HTTP_CORS_ALLOWED_ORIGINS",
		"SHEBA_GRPC_ADDR",
		"SHEBA_GRPC_REFLECTION",
		"SHEBA_GRPC_MAX_CONCURRENT_STREAMS",
		"SHEBA_GRPC_MAX_RECV_BYTES",
		"SHEBA_GRPC_MAX_OPEN_STREAMS",
		"SHEBA_GRPC_MAX_CONNECTION_IDLE",
		"SHEBA_DATABASE_URL",
		"DATABASE_URL",
		"SHEBA_DATABASE_MAX_CONNS",
		"SHEBA_DATABASE_READ_URL",
		"SHEBA_DATABASE_READ_MAX_CONNS",
		"SHEBA_DATABASE_READ_MAX_LAG",
		"SHEBA_LIMITS_MAX_INFLIGHT",
		"SHEBA_LIMITS_MAX_CONNECTIONS",
		"SHEBA_LIMITS_RATE",
		"SHEBA_LIMITS_BURST",
		"SHEBA_LIMITS_PER_KEY_RATE",
		"SHEBA_LIMITS_PER_KEY_BURST",
		"SHEBA_LIMITS_ANONYMOUS_RATE",
		"SHEBA_LIMITS_ANONYMOUS_BURST",
		"SHEBA_LIMITS_TIMEOUT",
		"SHEBA_LIMITS_ADAPTIVE",
		"SHEBA_LIMITS_MIN_INFLIGHT",
		"SHEBA_LIMITS_LOGIN_FAILURES_MAX",
		"SHEBA_LIMITS_LOGIN_FAILURES_MAX_ALL",
		"SHEBA_LIMITS_LOGIN_FAILURES_WINDOW",
		"SHEBA_AUTH_KEYS",
		"SHEBA_AUTH_PUBLIC",
		"SHEBA_COMPRESSION_MIN_BYTES",
		"SHEBA_SHUTDOWN_DRAIN_DELAY",
		"SHEBA_SHUTDOWN_TIMEOUT",
		"SHEBA_LOG_LEVEL",
		"SHEBA_LOG_FORMAT",
		"SHEBA_IDEMPOTENCY_TTL",
		"SHEBA_PAGING_SECRET",
		"SHEBA_WEBHOOKS_TIMEOUT",
		"SHEBA_WEBHOOKS_MAX_ATTEMPTS",
		"SHEBA_WEBHOOKS_BACKOFF_BASE",
		"SHEBA_WEBHOOKS_BACKOFF_MAX",
		"SHEBA_WEBHOOKS_PER_ENDPOINT_CONCURRENCY",
		"SHEBA_WEBHOOKS_ALLOW_PRIVATE_NETWORKS",
		"SHEBA_WEBHOOKS_MAX_ENDPOINTS",
		"SHEBA_WEBHOOKS_SECRET_OVERLAP",
		"SHEBA_WEBHOOKS_DATABASE_MAX_CONNS",
		"SHEBA_REDIS_URL",
		"SHEBA_REDIS_TIMEOUT",
		"SHEBA_REDIS_FALLBACK_SHARE",
		"SHEBA_HOOK_URL",
		"SHEBA_HOOK_PROTOCOL",
		"SHEBA_HOOK_METHODS",
		"SHEBA_HOOK_TIMEOUT",
		"SHEBA_HOOK_FAILURE_MODE",
		"SHEBA_HOOK_SEND_BODY",
		"SHEBA_HOOK_HEADERS",
		"SHEBA_HOOK_CACHE_ENTRIES",
		"SHEBA_TLS_CERT_FILE",
		"SHEBA_TLS_KEY_FILE",
		"SHEBA_TLS_CLIENT_CA_FILE",
		"SHEBA_OPERATOR_ADDR",
		"SHEBA_EVENTS_HEARTBEAT",
		"SHEBA_EVENTS_MAX_STREAMS_PER_KEY",
		"SHEBA_EVENTS_MAX_STREAMS",
		"SHEBA_EVENTS_MAX_DURATION",
		"SHEBA_EVENTS_BUFFER",
		"SHEBA_EVENTS_RETENTION",
	}
	var got []string
	_, _ = Load("", func(name string) (string, bool) {
		got = append(got, name)
		return "", false
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("variables looked up mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadFile(t *testing.T) {
	for _, test := range []struct {
		name string
		file string
		want func(*Config)
	}{
		{
			name: "empty file",
			file: "",
			want: func(*Config) {},
		},
		{
			name: "only comments",
			file: "# nothing here\n",
			want: func(*Config) {},
		},
		{
			name: "every key",
			file: `
http: { addr: "127.0.0.1:8081", max_body_bytes: 2048, read_header_timeout: 2s, read_timeout: 3s, idle_timeout: 4s, write_timeout: 9s, max_concurrent_bodies: 5, cors: { allowed_origins: ["https://app.example.com", "*"] } }
grpc: { addr: "127.0.0.1:9091", reflection: true, max_concurrent_streams: 6, max_recv_bytes: 9000, max_open_streams: 11, max_connection_idle: 12s }
database: { url: "host=db dbname=sheba", max_conns: 4, read_url: "host=standby dbname=sheba", read_max_conns: 5, read_max_lag: 250ms }
limits:
  max_inflight: 10
  max_connections: 13
  rate: 100.5
  burst: 20
  per_key_rate: 5
  per_key_burst: 2
  anonymous_rate: 7.5
  anonymous_burst: 8
  timeout: 1m30s
  adaptive: true
  min_inflight: 3
  login_failures: { max: 4, window: 2m }
auth:
  keys:
    - { id: "billing-svc", sha256: "` + testKey.SHA256 + `" }
  public: ["/sheba.v1.PingService/Ping", "/sheba.v1.AccountService/Login"]
compression: { min_bytes: 0 }
shutdown: { drain_delay: 5s, timeout: 20s }
log: { level: debug, format: text }
idempotency: { ttl: 1h }
webhooks: { timeout: 3s, max_attempts: 5, backoff: { base: 100ms, max: 1m }, per_endpoint_concurrency: 2, allow_private_networks: true, max_endpoints: 7, secret_overlap: 0s, database_max_conns: 5 }
redis: { url: "redis://cache:6379/2", timeout: 8ms, fallback_share: 0.25 }
tls: { cert_file: /tls/tls.crt, key_file: /tls/tls.key, client_ca_file: /tls/ca.crt }
operator: { addr: ":8081" }
events: { heartbeat: 2s, max_streams_per_key: 3, max_streams: 30, max_duration: 5m, buffer: 16, retention: 48h }
hook: { url: "unix:///run/hook.sock", protocol: http, methods: ["/sheba.v1.AccountService/Login"], timeout: 50ms, failure_mode: open, send_body: false, headers: ["user-agent"], cache_entries: 5 }
`,
			want: func(c *Config) {
				*c = Config{
					HTTP: HTTP{
						Addr: "127.0.0.1:8081", MaxBodyBytes: 2048,
						ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second,
						IdleTimeout: 4 * time.Second, WriteTimeout: 9 * time.Second, MaxConcurrentBodies: 5,
						CORS: CORS{AllowedOrigins: []string{"https://app.example.com", "*"}},
					},
					GRPC:     GRPC{Addr: "127.0.0.1:9091", Reflection: true, MaxConcurrentStreams: 6, MaxRecvBytes: 9000, MaxOpenStreams: 11, MaxConnectionIdle: 12 * time.Second},
					Database: Database{URL: "host=db dbname=sheba", MaxConns: 4, ReadURL: "host=standby dbname=sheba", ReadMaxConns: 5, ReadMaxLag: 250 * time.Millisecond},
					Limits: Limits{
						MaxInflight: 10, MaxConnections: 13, Rate: 100.5, Burst: 20,
						PerKeyRate: 5, PerKeyBurst: 2, AnonymousRate: 7.5, AnonymousBurst: 8,
						Timeout: 90 * time.Second, Adaptive: true, MinInflight: 3,
						LoginFailures: LoginFailures{Max: 4, Window: 2 * time.Minute},
					},
					Auth: Auth{
						Keys:   []APIKey{testKey},
						Public: []string{"/sheba.v1.PingService/Ping", "/sheba.v1.AccountService/Login"},
					},
					Compression: Compression{MinBytes: 0},
					Shutdown:    Shutdown{DrainDelay: 5 * time.Second, Timeout: 20 * time.Second},
					Log:         Log{Level: "debug", Format: "text"},
					Idempotency: Idempotency{TTL: time.Hour},
					Webhooks: Webhooks{
						Timeout: 3 * time.Second, MaxAttempts: 5,
						Backoff:                Backoff{Base: 100 * time.Millisecond, Max: time.Minute},
						PerEndpointConcurrency: 2, AllowPrivateNetworks: true, MaxEndpoints: 7,
						SecretOverlap:    0, // 0s in the file, not the default 24h
						DatabaseMaxConns: 5,
					},
					Redis: Redis{URL: "redis://cache:6379/2", Timeout: 8 * time.Millisecond, FallbackShare: 0.25},
					Hook: Hook{
						URL: "unix:///run/hook.sock", Protocol: HookHTTP, Methods: []string{"/sheba.v1.AccountService/Login"},
						Timeout: 50 * time.Millisecond, FailureMode: HookFailOpen, SendBody: false,
						Headers: []string{"user-agent"}, CacheEntries: 5,
					},
					TLS:      TLS{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key", ClientCAFile: "/tls/ca.crt"},
					Operator: Operator{Addr: ":8081"},
					Events: Events{
						Heartbeat: 2 * time.Second, MaxStreamsPerKey: 3, MaxStreams: 30,
						MaxDuration: 5 * time.Minute, Buffer: 16, Retention: 48 * time.Hour,
					},
				}
			},
		},
		{
			name: "absent keys keep their defaults",
			file: "limits:\n  max_inflight: 7\n",
			want: func(c *Config) { c.Limits.MaxInflight = 7 },
		},
		{
			name: "null section and null value keep their defaults",
			file: "http:\nlog:\n  level:\n",
			want: func(*Config) {},
		},
		{
			name: "quoted numbers and zero duration",
			file: "limits: { max_inflight: \"64\", rate: '2', burst: \"3\" }\nshutdown: { drain_delay: 0 }\n",
			want: func(c *Config) {
				c.Limits.MaxInflight = 64
				c.Limits.Rate = 2
				c.Limits.Burst = 3
			},
		},
		{
			name: "empty list replaces the default",
			file: "auth: { public: [] }\n",
			want: func(c *Config) { c.Auth.Public = []string{} },
		},
		{
			name: "numeric addr is taken as text",
			file: "http: { addr: \"[::1]:80\" }\n",
			want: func(c *Config) { c.HTTP.Addr = "[::1]:80" },
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			file := test.file
			if !strings.Contains(file, "database:") {
				file += "\ndatabase: { url: \"" + testURL + "\" }\n"
			}
			got, err := Load(writeConfig(t, file), mapLookup(nil))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := valid()
			test.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Load mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadEnv(t *testing.T) {
	const file = `
http: { addr: ":8081" }
database: { url: "postgres://file@localhost/sheba" }
log: { level: warn }
`
	for _, test := range []struct {
		name string
		env  map[string]string
		want func(*Config)
	}{
		{
			name: "none",
			want: func(*Config) {},
		},
		{
			name: "scalars of every type",
			env: map[string]string{
				"SHEBA_HTTP_ADDR":            "127.0.0.1:8000",
				"SHEBA_HTTP_MAX_BODY_BYTES":  "4096",
				"SHEBA_GRPC_REFLECTION":      "true",
				"SHEBA_GRPC_MAX_RECV_BYTES":  "131072",
				"SHEBA_DATABASE_MAX_CONNS":   "3",
				"SHEBA_LIMITS_MAX_INFLIGHT":  "50",
				"SHEBA_LIMITS_RATE":          "2.5",
				"SHEBA_LIMITS_BURST":         "5",
				"SHEBA_LIMITS_TIMEOUT":       "250ms",
				"SHEBA_SHUTDOWN_DRAIN_DELAY": "5s",
				"SHEBA_SHUTDOWN_TIMEOUT":     "1m",
				"SHEBA_LOG_LEVEL":            "debug",
				"SHEBA_LOG_FORMAT":           "text",
				"SHEBA_IDEMPOTENCY_TTL":      "2h",
				// A key of a sub-section: section, sub-section and key.
				"SHEBA_LIMITS_LOGIN_FAILURES_MAX":    "3",
				"SHEBA_LIMITS_LOGIN_FAILURES_WINDOW": "30s",
			},
			want: func(c *Config) {
				c.HTTP.Addr = "127.0.0.1:8000"
				c.HTTP.MaxBodyBytes = 4096
				c.GRPC.Reflection = true
				c.GRPC.MaxRecvBytes = 128 << 10
				c.Database.MaxConns = 3
				c.Limits.MaxInflight = 50
				c.Limits.Rate = 2.5
				c.Limits.Burst = 5
				c.Limits.Timeout = 250 * time.Millisecond
				c.Shutdown.DrainDelay = 5 * time.Second
				c.Shutdown.Timeout = time.Minute
				c.Log.Level = "debug"
				c.Log.Format = "text"
				c.Idempotency.TTL = 2 * time.Hour
				c.Limits.LoginFailures = LoginFailures{Max: 3, Window: 30 * time.Second}
			},
		},
		{
			name: "events",
			env: map[string]string{
				"SHEBA_EVENTS_HEARTBEAT":           "5s",
				"SHEBA_EVENTS_MAX_STREAMS_PER_KEY": "3",
				"SHEBA_EVENTS_MAX_STREAMS":         "40",
				"SHEBA_EVENTS_MAX_DURATION":        "10m",
				"SHEBA_EVENTS_BUFFER":              "64",
				"SHEBA_EVENTS_RETENTION":           "24h",
			},
			want: func(c *Config) {
				c.Events = Events{Heartbeat: 5 * time.Second, MaxStreamsPerKey: 3, MaxStreams: 40, MaxDuration: 10 * time.Minute, Buffer: 64, Retention: 24 * time.Hour}
			},
		},
		{
			name: "origins of a nested section",
			env:  map[string]string{"SHEBA_HTTP_CORS_ALLOWED_ORIGINS": `["http://localhost:3000"]`},
			want: func(c *Config) { c.HTTP.CORS.AllowedOrigins = []string{"http://localhost:3000"} },
		},
		{
			name: "JSON list",
			env:  map[string]string{"SHEBA_AUTH_PUBLIC": `["/sheba.v1.PingService/Ping", "/sheba.v1.AccountService/Login"]`},
			want: func(c *Config) {
				c.Auth.Public = []string{"/sheba.v1.PingService/Ping", "/sheba.v1.AccountService/Login"}
			},
		},
		{
			name: "YAML flow list of keys",
			env:  map[string]string{"SHEBA_AUTH_KEYS": `[{id: billing-svc, sha256: ` + testKey.SHA256 + `}]`},
			want: func(c *Config) { c.Auth.Keys = []APIKey{testKey} },
		},
		{
			name: "SHEBA_DATABASE_URL over the file",
			env:  map[string]string{"SHEBA_DATABASE_URL": "postgres://sheba-env@localhost/sheba"},
			want: func(c *Config) { c.Database.URL = "postgres://sheba-env@localhost/sheba" },
		},
		{
			name: "DATABASE_URL over SHEBA_DATABASE_URL",
			env: map[string]string{
				"SHEBA_DATABASE_URL": "postgres://sheba-env@localhost/sheba",
				"DATABASE_URL":       "postgres://plain@localhost/sheba",
			},
			want: func(c *Config) { c.Database.URL = "postgres://plain@localhost/sheba" },
		},
		{
			name: "empty values are unset",
			env: map[string]string{
				"SHEBA_HTTP_ADDR":    "",
				"SHEBA_LOG_LEVEL":    "",
				"SHEBA_DATABASE_URL": "postgres://sheba-env@localhost/sheba",
				"DATABASE_URL":       "",
			},
			want: func(c *Config) { c.Database.URL = "postgres://sheba-env@localhost/sheba" },
		},
		{
			name: "values are not trimmed or reinterpreted for strings",
			env:  map[string]string{"SHEBA_HTTP_ADDR": ":8082"},
			want: func(c *Config) { c.HTTP.Addr = ":8082" },
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := Load(writeConfig(t, file), mapLookup(test.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := Default()
			want.HTTP.Addr = ":8081"
			want.Database.URL = "postgres://file@localhost/sheba"
			want.Log.Level = "warn"
			test.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Load mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadErrors covers problems found while reading the file and the
// environment, and validation problems whose error must name the variable.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	for _, test := range []struct {
		name    string
		file    string // "" means no file
		path    string // overrides the written file
		env     map[string]string
		wantKey string
		wantEnv string
		wantMsg string // a part of Error()
	}{
		{
			name:    "missing file",
			path:    missing,
			wantMsg: "cannot read config file: open " + missing + ": no such file",
		},
		{
			name:    "directory",
			path:    dir,
			wantMsg: dir,
		},
		{
			name:    "not YAML",
			file:    "http: [\n",
			wantMsg: "is not valid YAML",
		},
		{
			name:    "events.max_duration from the environment at the connection age",
			env:     map[string]string{"DATABASE_URL": testURL, "SHEBA_EVENTS_MAX_DURATION": "30m"},
			wantKey: "events.max_duration",
			wantEnv: "SHEBA_EVENTS_MAX_DURATION",
			wantMsg: "events.max_duration (SHEBA_EVENTS_MAX_DURATION): must be greater than 0 and below 27m0s",
		},
		{
			name:    "two documents",
			file:    "http: {}\n---\ngrpc: {}\n",
			wantMsg: "exactly one YAML document",
		},
		{
			name:    "top level is a list",
			file:    "- http\n",
			wantMsg: "want a mapping of keys to values, got a list",
		},
		{
			name:    "unknown section",
			file:    "htttp: { addr: \":80\" }\n",
			wantKey: "htttp",
			wantMsg: "htttp: unknown key (want one of http, grpc, database, limits, auth, compression, shutdown, log, idempotency, paging, webhooks, redis, hook, tls, operator, events)",
		},
		{
			name:    "unknown key",
			file:    "limits:\n  max_inflite: 5\n",
			wantKey: "limits.max_inflite",
			wantMsg: "limits.max_inflite: unknown key (want one of max_inflight, max_connections, rate, burst, per_key_rate, per_key_burst, anonymous_rate, anonymous_burst, timeout, adaptive, min_inflight, login_failures)",
		},
		{
			name:    "unknown key in a list element",
			file:    "auth:\n  keys:\n    - { id: a, hash: b }\n",
			wantKey: "auth.keys[0].hash",
			wantMsg: "unknown key (want one of id, sha256)",
		},
		{
			name:    "key given twice",
			file:    "log: { level: info, level: debug }\n",
			wantKey: "log.level",
			wantMsg: "key given twice",
		},
		{
			name:    "wrong type: integer",
			file:    "limits:\n  max_inflight: lots\n",
			wantKey: "limits.max_inflight",
			wantMsg: `limits.max_inflight: want an integer, got "lots" (`,
		},
		{
			name:    "wrong type: message gives the line",
			file:    "limits:\n  max_inflight: lots\n",
			wantKey: "limits.max_inflight",
			wantMsg: "line 2)",
		},
		{
			name:    "wrong type: bool",
			file:    "grpc: { reflection: maybe }\n",
			wantKey: "grpc.reflection",
			wantMsg: `want true or false, got "maybe"`,
		},
		{
			name:    "wrong type: duration without unit",
			file:    "limits: { timeout: 5 }\n",
			wantKey: "limits.timeout",
			wantMsg: `want a duration such as "5s" or "1m30s", got "5"`,
		},
		{
			name:    "wrong type: number out of range",
			file:    "database: { max_conns: 3000000000 }\n",
			wantKey: "database.max_conns",
			wantMsg: "want a 32-bit integer",
		},
		{
			name:    "wrong type: float",
			file:    "limits: { rate: fast }\n",
			wantKey: "limits.rate",
			wantMsg: "want a number",
		},
		{
			name:    "wrong type: section is a scalar",
			file:    "http: 8080\n",
			wantKey: "http",
			wantMsg: `want a mapping of keys to values, got "8080"`,
		},
		{
			name:    "wrong type: string is a list",
			file:    "http: { addr: [a] }\n",
			wantKey: "http.addr",
			wantMsg: "want a string, got a list",
		},
		{
			name:    "wrong type: list is a scalar",
			file:    "auth: { public: /sheba.v1.PingService/Ping }\n",
			wantKey: "auth.public",
			wantMsg: "want a list",
		},
		{
			name:    "env: bad integer",
			env:     map[string]string{"SHEBA_LIMITS_MAX_INFLIGHT": "lots"},
			wantKey: "limits.max_inflight",
			wantEnv: "SHEBA_LIMITS_MAX_INFLIGHT",
			wantMsg: `limits.max_inflight (SHEBA_LIMITS_MAX_INFLIGHT): want an integer, got "lots"`,
		},
		{
			name:    "env: bad duration",
			env:     map[string]string{"SHEBA_SHUTDOWN_DRAIN_DELAY": "30"},
			wantKey: "shutdown.drain_delay",
			wantEnv: "SHEBA_SHUTDOWN_DRAIN_DELAY",
			wantMsg: "want a duration",
		},
		{
			name:    "env: grpc.max_recv_bytes out of range",
			env:     map[string]string{"SHEBA_GRPC_MAX_RECV_BYTES": "0"},
			wantKey: "grpc.max_recv_bytes",
			wantEnv: "SHEBA_GRPC_MAX_RECV_BYTES",
			wantMsg: "grpc.max_recv_bytes (SHEBA_GRPC_MAX_RECV_BYTES): must be from 1 to 67108864 (64 MiB), got 0",
		},
		{
			name:    "env: bad bool",
			env:     map[string]string{"SHEBA_GRPC_REFLECTION": "enabled"},
			wantKey: "grpc.reflection",
			wantEnv: "SHEBA_GRPC_REFLECTION",
			wantMsg: "want true or false",
		},
		{
			name:    "env: list that is not YAML",
			env:     map[string]string{"SHEBA_AUTH_PUBLIC": `["/a.B/C"`},
			wantKey: "auth.public",
			wantEnv: "SHEBA_AUTH_PUBLIC",
			wantMsg: "want a YAML or JSON list",
		},
		{
			name:    "env: scalar for a list",
			env:     map[string]string{"SHEBA_AUTH_PUBLIC": "/a.B/C"},
			wantKey: "auth.public",
			wantEnv: "SHEBA_AUTH_PUBLIC",
			wantMsg: `want a list, got "/a.B/C"`,
		},
		{
			name:    "env: unknown key in a list element",
			env:     map[string]string{"SHEBA_AUTH_KEYS": `[{"id": "a", "sha": "b"}]`},
			wantKey: "auth.keys[0].sha",
			wantEnv: "SHEBA_AUTH_KEYS",
			wantMsg: "unknown key",
		},
		{
			name:    "invalid value from the file",
			file:    "limits: { max_inflight: 0 }\n",
			wantKey: "limits.max_inflight",
			wantMsg: "limits.max_inflight: must be at least 1, got 0",
		},
		{
			name:    "invalid value from the env",
			file:    "limits: { max_inflight: 5 }\n",
			env:     map[string]string{"SHEBA_LIMITS_MAX_INFLIGHT": "0"},
			wantKey: "limits.max_inflight",
			wantEnv: "SHEBA_LIMITS_MAX_INFLIGHT",
			wantMsg: "limits.max_inflight (SHEBA_LIMITS_MAX_INFLIGHT): must be at least 1, got 0",
		},
		{
			name:    "invalid value of a sub-section from the env",
			env:     map[string]string{"SHEBA_LIMITS_LOGIN_FAILURES_WINDOW": "0s"},
			wantKey: "limits.login_failures.window",
			wantEnv: "SHEBA_LIMITS_LOGIN_FAILURES_WINDOW",
			wantMsg: "limits.login_failures.window (SHEBA_LIMITS_LOGIN_FAILURES_WINDOW): must be at least 1s, got 0s",
		},
		{
			name:    "invalid list element from the env",
			env:     map[string]string{"SHEBA_AUTH_KEYS": `[{"id": "a", "sha256": "B"}]`},
			wantKey: "auth.keys[0].sha256",
			wantEnv: "SHEBA_AUTH_KEYS",
			wantMsg: "must be exactly 64 lowercase hex digits",
		},
		{
			name:    "no database URL",
			env:     map[string]string{"DATABASE_URL": ""},
			wantKey: "database.url",
			wantMsg: "database.url: must be set: set DATABASE_URL",
		},
		{
			name:    "bad DATABASE_URL",
			env:     map[string]string{"DATABASE_URL": "postgres://u:hunter2@host:port/db"},
			wantKey: "database.url",
			wantEnv: "DATABASE_URL",
			wantMsg: "database.url (DATABASE_URL): must be a postgres URL",
		},
		{
			name:    "bad SHEBA_DATABASE_URL",
			env:     map[string]string{"SHEBA_DATABASE_URL": "postgres://u:hunter2@host:port/db", "DATABASE_URL": ""},
			wantKey: "database.url",
			wantEnv: "SHEBA_DATABASE_URL",
			wantMsg: "must be a postgres URL",
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			path := test.path
			if test.file != "" {
				path = writeConfig(t, test.file)
			}
			env := map[string]string{"DATABASE_URL": testURL}
			for k, v := range test.env {
				env[k] = v
			}
			_, err := Load(path, mapLookup(env))
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", test.wantMsg)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Load error %v (%T) is not an *Error", err, err)
			}
			if got := []string{e.Key, e.Env}; !cmp.Equal(got, []string{test.wantKey, test.wantEnv}) {
				t.Errorf("Load error Key, Env = %q, want %q, %q (error: %v)", got, test.wantKey, test.wantEnv, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, test.wantMsg) {
				t.Errorf("Load error = %q, want it to contain %q", msg, test.wantMsg)
			}
			if strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
				t.Errorf("Load error = %q, want one line without the password", msg)
			}
		})
	}
}
