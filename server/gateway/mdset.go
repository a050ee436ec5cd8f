package gateway

import (
	"slices"

	"google.golang.org/grpc/metadata"
)

// mdSet collects the response metadata of an in-process call, set in
// several steps (grpc.SetHeader, grpc.SetTrailer), without copying it each
// time as metadata.Join does: each copy was allocations of every REST
// call. The zero mdSet is empty. The metadata of the first call with any is kept as it is, and only a second one makes a
// map of the mdSet's own, where the values of a key set once are still the
// slice the caller gave, clipped so that a value added later to that key
// goes to a slice of its own. So a caller must hand Add metadata made for
// the call and never change it after, as every link of the chain does
// (grpc-go copies it, for callers that might), and a reader of MD must
// only read it.
type mdSet struct {
	md  metadata.MD
	own bool // md is the mdSet's, not a caller's
}

// Add adds the values of md.
func (s *mdSet) Add(md metadata.MD) {
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
func (s *mdSet) MD() metadata.MD { return s.md }
