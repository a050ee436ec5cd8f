package app

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestGRPCLogger checks that grpc-go's lines become slog records with
// logger=grpc at the matching level, Info ones as Debug.
func TestGRPCLogger(t *testing.T) {
	var buf bytes.Buffer
	g := newGRPCLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	g.Infof("dialing %s", "x")
	g.Warningln("too", "many", "pings")
	g.Error("transport: ", "closed")
	var got []string
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if rec["logger"] != "grpc" {
			t.Errorf("line %q: logger %v, want grpc", line, rec["logger"])
		}
		got = append(got, rec["level"].(string)+" "+rec["msg"].(string))
	}
	want := []string{"DEBUG dialing x", "WARN too many pings", "ERROR transport: closed"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if g.V(1) || !g.V(0) {
		t.Error("V: want level 0 on, 1 off")
	}
}
