package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// eventServer implements shebav1.EventServiceServer.
//
// For now StreamEvents answers UNIMPLEMENTED: the service, its route and
// its place in the method table exist, so that every list of methods
// (routes, CORS, policies, docs) holds it; streaming the event log is a
// later step.
type eventServer struct {
	shebav1.UnimplementedEventServiceServer
}

// errStreamEventsUnimplemented is StreamEvents' answer until it streams.
var errStreamEventsUnimplemented = reason.Error(codes.Unimplemented, reason.ForCode(codes.Unimplemented),
	"StreamEvents is not served yet")

// StreamEvents answers UNIMPLEMENTED (501 on REST).
func (eventServer) StreamEvents(*shebav1.StreamEventsRequest, grpc.ServerStreamingServer[shebav1.StreamEventsResponse]) error {
	return errStreamEventsUnimplemented
}
