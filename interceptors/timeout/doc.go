// Package timeout bounds every call by a deadline: the shorter of the
// client's own deadline and a server maximum. The deadline travels in the
// context, so it reaches the database query, which pgx cancels when it
// passes.
//
// It sits last before the handler, so that only the handler's time counts.
// A call whose deadline passed answers DeadlineExceeded whatever error the
// handler made of it.
//
// Codes: DeadlineExceeded.
package timeout
