package reason

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
)

// MaxViolations is the most field violations an answer lists: a request
// with a list of many bad entries gets the first ones, so that no error
// answer grows with what was sent (docs/api.md#errors).
const MaxViolations = 8

// Violations collects the field violations of one request: those of its
// constraints (interceptors/protovalidate), or those a handler finds itself
// (a page token, a webhook URL's target).
type Violations []*errdetails.BadRequest_FieldViolation

// Add records a violation of field, unless MaxViolations are recorded
// already. The description is made valid UTF-8, so the answer can always
// be marshaled; text it quotes from the request goes through Quote.
func (v *Violations) Add(field, description string) {
	if len(*v) >= MaxViolations {
		return
	}
	*v = append(*v, &errdetails.BadRequest_FieldViolation{Field: ValidUTF8(field), Description: ValidUTF8(description)})
}

// Err returns nil when there are no violations, else an InvalidArgument
// error whose message names the first one ("invalid username: ...") and
// whose details are the ErrorInfo (INVALID_ARGUMENT) and a BadRequest
// listing them all.
func (v Violations) Err() error { return v.ErrAs(InvalidArgument) }

// ErrAs is Err with reason r in the ErrorInfo, for a rule that has a
// reason of its own (WEBHOOK_URL_NOT_ALLOWED).
func (v Violations) ErrAs(r string) error {
	if len(v) == 0 {
		return nil
	}
	msg := fmt.Sprintf("invalid %s: %s", v[0].Field, v[0].Description)
	return Error(codes.InvalidArgument, r, msg, &errdetails.BadRequest{FieldViolations: v})
}
