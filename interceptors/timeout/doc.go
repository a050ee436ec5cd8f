// Package timeout bounds every call by a deadline: the shorter of the
// client's own deadline and a server maximum. The deadline travels in the
// context, so it reaches the database query, which pgx cancels when it
// passes.
//
// It sits last before the handler, so that only the handler's time counts.
// A call whose deadline passed answers DeadlineExceeded whatever error the
// handler made of it, and also when the handler succeeded too late: the
// answer is then dropped (as in gRPC, a DeadlineExceeded on a write does not
// say whether the write happened).
//
// Codes: DeadlineExceeded, reason DEADLINE_EXCEEDED.
package timeout
