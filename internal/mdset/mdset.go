// Package mdset collects the response metadata a call sets in several
// steps (grpc.SetHeader, grpc.SetTrailer) without copying it each time, as
// metadata.Join, which grpc-go's stream calls on every SetHeader, does: the
// chain sets headers in several links, and each copy was allocations of
// every call.
package mdset

import (
	"slices"

	"google.golang.org/grpc/metadata"
)

// Set is the metadata set so far; the zero Set is empty. The metadata of
// the first call with any is kept as it is, and only a second one makes a
// map of the Set's own, where the values of a key set once are still the
// slice the caller gave, clipped so that a value added later to that key
// goes to a slice of its own. So a caller must hand Add metadata made for
// the call and never change it after, as every link of the chain does
// (grpc-go copies it, for callers that might), and a reader of MD must
// only read it.
type Set struct {
	md  metadata.MD
	own bool // md is the Set's, not a caller's
}

// Add adds the values of md.
func (s *Set) Add(md metadata.MD) {
	switch {
	case len(md) == 0:
		return
	case s.md == nil:
		s.md = md
		return
	case !s.own:
		mine := make(metadata.MD, len(s.md)+len(md))
		for k, v := range s.md {
			mine[k] = slices.Clip(v)
		}
		s.md, s.own = mine, true
	}
	for k, v := range md {
		if old, ok := s.md[k]; ok {
			s.md[k] = append(old, v...)
		} else {
			s.md[k] = slices.Clip(v)
		}
	}
}

// MD returns the metadata set, nil if none.
func (s *Set) MD() metadata.MD { return s.md }
