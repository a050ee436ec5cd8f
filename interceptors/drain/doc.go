// Package drain ends long-lived gRPC streams at shutdown.
//
// grpc.Server.GracefulStop waits for every open stream, and some streams
// never end by themselves: a client that keeps a server-reflection stream
// open (grpcurl-style dynamic clients do) or watches health would hold the
// drain until the shutdown timeout. A Drainer's stream interceptor runs each
// stream handler with a context that End cancels, so handlers that watch it
// return, and it answers the stream itself for handlers that do not (the
// reflection service waits in Recv, which no context of ours can
// interrupt): the stream then ends with Unavailable "server shutting down",
// which grpc-go writes and which cancels the stream, so the handler's Recv
// returns and it leaves too. Streams opened after End are refused the same
// way.
//
// Position: the stream interceptor of the grpc.Server (sheba's business
// methods are unary; unary calls are not touched, they finish in the
// drain). Codes: Unavailable after End.
//
// See docs/operations.md#graceful-shutdown.
package drain
