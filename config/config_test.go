package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// testURL is a database URL that parses; nothing connects to it.
const testURL = "postgres://sheba@localhost:5432/sheba?sslmode=disable"

// mapLookup returns a lookup function backed by m, in place of
// os.LookupEnv.
func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// writeConfig writes content to a file in a fresh directory and returns its
// path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sheba.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// valid returns Default with a database URL, which passes Validate.
func valid() Config {
	c := Default()
	c.Database.URL = testURL
	return c
}

func TestDefault(t *testing.T) {
	got, err := Load("", mapLookup(map[string]string{"DATABASE_URL": testURL}))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(valid(), got); diff != "" {
		t.Errorf("Load with no file and no overrides mismatch (-want +got):\n%s", diff)
	}
	// Said in docs/configuration.md: Envoy's rate-limit timeout (it was
	// 5ms), and half of each rate while Redis is out.
	if r := got.Redis; r.Timeout != 20*time.Millisecond || r.FallbackShare != 0.5 {
		t.Errorf("redis defaults: timeout %v, fallback_share %v; want 20ms, 0.5", r.Timeout, r.FallbackShare)
	}

	// The events section of the contract.
	if diff := cmp.Diff(Events{
		Heartbeat: 15 * time.Second, MaxStreamsPerKey: 10, MaxStreams: 1000,
		MaxDuration: 25 * time.Minute, Buffer: 256, Retention: 168 * time.Hour,
	}, got.Events); diff != "" {
		t.Errorf("events defaults (-want +got):\n%s", diff)
	}

	// The bound of a gRPC message is 64 KiB: sheba's valid requests are a
	// few KiB.
	if got := Default().GRPC.MaxRecvBytes; got != 64<<10 {
		t.Errorf("grpc.max_recv_bytes defaults to %d, want 65536", got)
	}

	// auth.public's default is the methods the protos make public.
	var public []string
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			if m.Policy.Public {
				public = append(public, m.FullName)
			}
		}
	}
	if diff := cmp.Diff(public, Default().Auth.Public); diff != "" || len(public) == 0 {
		t.Errorf("auth.public defaults to (-the public methods +got):\n%s", diff)
	}

	// Default must not share slices between calls.
	a := Default()
	a.Auth.Public[0] = "/changed.Service/Method"
	if b := Default(); b.Auth.Public[0] != "/sheba.v1.PingService/Ping" {
		t.Errorf("Default().Auth.Public[0] = %q after changing an earlier result, want the default", b.Auth.Public[0])
	}
}

func TestErrorString(t *testing.T) {
	for _, test := range []struct {
		name string
		err  Error
		want string
	}{
		{
			name: "key",
			err:  Error{Key: "limits.max_inflight", Msg: "must be at least 1, got 0"},
			want: "limits.max_inflight: must be at least 1, got 0",
		},
		{
			name: "key and env",
			err:  Error{Key: "limits.max_inflight", Env: "SHEBA_LIMITS_MAX_INFLIGHT", Msg: "must be at least 1, got 0"},
			want: "limits.max_inflight (SHEBA_LIMITS_MAX_INFLIGHT): must be at least 1, got 0",
		},
		{
			name: "no key",
			err:  Error{Msg: "cannot read config file: open x.yaml: no such file or directory"},
			want: "cannot read config file: open x.yaml: no such file or directory",
		},
		{
			name: "multi-line message",
			err:  Error{Key: "http", Msg: "first\nsecond\r\nthird\n"},
			want: "http: first second third",
		},
	} {
		t.Run(test.name, func(t *testing.T) {
			if got := test.err.Error(); got != test.want {
				t.Errorf("Error() = %q, want %q", got, test.want)
			}
		})
	}
}

// fromProtos are the keys whose default the protos say (the method
// table), which example.yaml shows in a comment.
var fromProtos = map[string]bool{"auth.public": true}

// TestSampleFiles checks that the files shipped in config/ load, validate
// and say what they claim to.
func TestSampleFiles(t *testing.T) {
	lookup := mapLookup(map[string]string{"DATABASE_URL": testURL})
	for _, test := range []struct {
		path string
		want func(*Config)
	}{
		{
			path: "dev.yaml",
			want: func(c *Config) {
				// The documented dev key: sha256("sheba-dev-key-not-a-secret").
				c.Auth.Keys = []APIKey{{ID: "dev", SHA256: "e4ccd6ac185343fd6cf8ef200416646ae7487fcf6c898a6b032991dafa06e8df"}}
				c.Log.Format = "text"
				c.Webhooks.AllowPrivateNetworks = true
				c.GRPC.Reflection = true
				// The origin of make example-browser's page.
				c.HTTP.CORS.AllowedOrigins = []string{"http://127.0.0.1:8081", "http://localhost:8081"}
			},
		},
		{
			// example.yaml documents the defaults, so it must equal them.
			path: "example.yaml",
			want: func(c *Config) {
				c.Auth.Keys = []APIKey{}
				c.Hook.Methods, c.Hook.Headers = []string{}, []string{}
				c.HTTP.CORS.AllowedOrigins = []string{}
			},
		},
	} {
		t.Run(test.path, func(t *testing.T) {
			got, err := Load(test.path, lookup)
			if err != nil {
				t.Fatalf("Load(%q): %v", test.path, err)
			}
			want := valid()
			test.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Load(%q) mismatch (-want +got):\n%s", test.path, diff)
			}
		})
	}

	t.Run("example.yaml lists every key", func(t *testing.T) {
		data, err := os.ReadFile("example.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		var got []string
		// Sub-sections (webhooks.backoff) are mappings inside a section.
		var walk func(prefix string, m *yaml.Node)
		walk = func(prefix string, m *yaml.Node) {
			for j := 0; j+1 < len(m.Content); j += 2 {
				key, value := prefix+"."+m.Content[j].Value, m.Content[j+1]
				if value.Kind == yaml.MappingNode {
					walk(key, value)
					continue
				}
				got = append(got, key)
			}
		}
		sections := doc.Content[0].Content
		for i := 0; i+1 < len(sections); i += 2 {
			walk(sections[i].Value, sections[i+1])
		}
		var want []string
		for _, k := range allKeys() {
			// A key whose default the protos say is shown in a
			// comment, so that the file does not pin it.
			if fromProtos[k.key] {
				section, name, _ := strings.Cut(k.key, ".")
				if !regexp.MustCompile(`(?m)^` + section + `:\n(?:  .*\n|\n)*?  # ` + name + `: `).Match(data) {
					t.Errorf("example.yaml: no comment \"# %s: ...\" in section %s", name, section)
				}
				continue
			}
			want = append(want, k.key)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("keys in example.yaml mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("docs/configuration.md has a row of every key", func(t *testing.T) {
		data, err := os.ReadFile("../docs/configuration.md")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range allKeys() {
			row := "| `" + k.key + "` | `" + k.env + "` |"
			if k.key == "database.url" {
				row = "| `database.url` | `DATABASE_URL` or `SHEBA_DATABASE_URL` |"
			}
			if !strings.Contains(string(data), row) {
				t.Errorf("docs/configuration.md: no row starting %s", row)
			}
		}
	})
}
