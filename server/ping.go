package server

import (
	"context"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// pingServer implements shebav1.PingServiceServer.
type pingServer struct {
	shebav1.UnimplementedPingServiceServer
}

// Ping answers "pong" and touches nothing else.
func (pingServer) Ping(context.Context, *shebav1.PingRequest) (*shebav1.PingResponse, error) {
	return pong, nil
}

// pong is every answer of Ping: one message, never changed, which the
// codecs only read (protobuf-go marshals a message from several goroutines
// at once safely), rather than one allocation per call.
var pong = &shebav1.PingResponse{Message: "pong"}
