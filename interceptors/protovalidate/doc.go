// Package protovalidate checks every request message against the input
// rules its proto declares: the buf.validate constraints of its fields
// (proto/sheba/v1), evaluated by buf.build/go/protovalidate with one
// validator built at start.
//
// An invalid request is answered InvalidArgument with one
// google.rpc.BadRequest that lists every violated field, at most
// reason.MaxViolations, under the names sheba has always given them: the
// field's proto name, with the index of an item of a repeated field
// ("event_types[1]"). A field that breaks several rules is listed once,
// with the first; a repeated field whose items must be unique names each
// item that repeats an earlier one. The status message names the first
// violation ("invalid username: ..."), and the errordetails interceptor
// adds the one ErrorInfo, reason INVALID_ARGUMENT.
//
// go-grpc-middleware v2 has a protovalidate interceptor too, but it
// answers with buf.validate.Violations in place of the BadRequest (and
// protovalidate's own field paths), which sheba's clients do not read, and
// it has no option to shape the answer: hence this package, which answers
// as the handlers did before the rules moved into the protos.
//
// It sits after auth, the rate limits, the concurrency limit and the
// timeout, so an invalid request is authenticated, limited and counted
// like any other; and before the hook, the database gate and idempotency
// (internal/app/chain.go), so the hook never sees it, it is answered 400
// even while the database is down, and it takes no idempotency key, nor
// is its answer recorded under one.
//
// What a constraint cannot say stays with the handler: a page token's
// signature, a webhook URL's target, and whatever needs a lookup.
//
// Codes: InvalidArgument; Internal when the validator fails otherwise (a
// message it was not built for).
package protovalidate
