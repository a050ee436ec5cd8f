// Package connlimit bounds the connections a listener holds at once
// (limits.max_connections, docs/operations.md#connections-and-streams).
//
// A Listener accepts every connection; one beyond the bound is closed at
// once, reported to its OnRefuse func, and never handed to the server. A
// connection frees its place when the server closes it.
//
// golang.org/x/net/netutil.LimitListener bounds connections too, but by
// blocking Accept until one closes: the extra clients then wait in the
// kernel's accept queue, and a flood of them fills it for everyone,
// keyed callers included, with no sign of it. Closing at once tells the
// client, lets the queue drain, and is counted.
package connlimit
