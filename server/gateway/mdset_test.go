package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"
)

// TestMDSet checks metadata added several times: every value kept in order,
// and no caller's metadata changed.
func TestMDSet(t *testing.T) {
	var s mdSet
	if s.MD() != nil {
		t.Errorf("empty Set: got %v", s.MD())
	}
	first := metadata.MD{"a": make([]string, 1, 4)}
	first["a"][0] = "1"
	second := metadata.Pairs("a", "2", "b", "x")
	third := metadata.Pairs("b", "y", "a", "3")
	s.Add(nil)
	s.Add(first)
	s.Add(second)
	s.Add(third)
	want := metadata.MD{"a": {"1", "2", "3"}, "b": {"x", "y"}}
	if diff := cmp.Diff(want, s.MD()); diff != "" {
		t.Errorf("set (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(metadata.MD{"a": {"1"}}, first); diff != "" {
		t.Errorf("the first caller's metadata changed (-want +got):\n%s", diff)
	}
	if got := first["a"][:2][1]; got != "" {
		t.Errorf("a value was written past the first caller's slice: %q", got)
	}
	if diff := cmp.Diff(metadata.Pairs("a", "2", "b", "x"), second); diff != "" {
		t.Errorf("the second caller's metadata changed (-want +got):\n%s", diff)
	}
}
