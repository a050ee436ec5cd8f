// Package resetguard ends HTTP/2 connections whose client resets streams
// faster than it completes calls: the "rapid reset" attack
// (CVE-2023-44487), where a client opens a stream and resets it at once,
// over and over. Each such stream costs the server a handler, yet the
// client never has more than a few streams open, so
// SETTINGS_MAX_CONCURRENT_STREAMS does not bound it
// (docs/operations.md#connections-and-streams).
//
// The rule, per connection: every stream the client resets takes one from
// a budget, every call the server completes gives one back, never beyond
// the budget's size; a reset that finds the budget empty ends the
// connection. So a client may reset as many streams as it completes calls,
// plus the budget, whatever the rate: one that cancels fewer calls than it
// completes, or hedges them with one extra attempt (the loser's reset is
// matched by the winner's completion), never runs dry, while one that
// resets streams and completes none does within a budget of streams. It is the rule of
// Envoy's premature-reset check (close once resets reach half the
// streams) without its per-stream clock, and with no credit banked beyond
// the budget: a long honest life does not buy a long attack.
//
// grpc-go has no hook for this, and no answer of its own: it caps the
// handlers running per connection at the connection's stream limit, so a
// resetting client is slowed, never stopped. Conn therefore watches the
// frames of a connection given to grpc-go, both ways, reading their 9-byte
// headers with golang.org/x/net/http2's ReadFrameHeader: client RST_STREAM
// frames are resets, server HEADERS frames that end their stream (the
// trailers of a call) are completions, unless the client reset that stream
// too, before or after: grpc-go answers a call refused from its headers (a
// missing API key) whether or not its reset has come, and such answers
// must not pay for the resets. When the budget runs out the connection is
// closed, for grpc-go cannot be told to send GOAWAY.
//
// net/http's HTTP/2 server sends GOAWAY when a handler's answer carries
// "Connection: close", and gives each connection a context
// (http.Server.ConnContext). Handler counts there: a handler that returns
// with its request's context cancelled was reset (or its connection
// closed), one that returns without was completed; once the budget has
// run out, every later request of the connection answers with
// "Connection: close", so the connection is sent GOAWAY, and it is closed
// a quarter second later. A reset that net/http reads after the
// stream's handler has returned is not seen (net/http drops it): that
// stream cost the server a whole request, as any request does, and was not
// the cheap cancelled work that rapid reset is about. net/http's own guard
// (too_many_early_resets) acts only once four times its stream limit of
// handlers wait to start.
package resetguard
