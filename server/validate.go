package server

import (
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// The input rules of docs/api.md.
var (
	usernameRE = regexp.MustCompile(`^[a-z0-9._-]{3,64}$`)
	planRE     = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)
)

const (
	minPasswordBytes = 8
	maxPasswordBytes = 256

	defaultPageSize = 50
	maxPageSize     = 1000
)

// maxViolations is the most field violations an answer lists: a request
// with a list of many bad entries gets the first ones, so that no error
// answer grows with what was sent (docs/api.md#errors).
const maxViolations = 8

// violations collects the field violations of one request.
type violations []*errdetails.BadRequest_FieldViolation

// add records a violation, unless maxViolations are recorded already. A
// description that quotes the request is made valid UTF-8, so the answer
// can always be marshaled; what it quotes goes through reason.Quote.
func (v *violations) add(field, description string) {
	if len(*v) >= maxViolations {
		return
	}
	*v = append(*v, &errdetails.BadRequest_FieldViolation{Field: field, Description: reason.ValidUTF8(description)})
}

// err returns nil when there are no violations, else an InvalidArgument status
// whose message names the first one and whose details are the ErrorInfo
// (INVALID_ARGUMENT) and a BadRequest listing them all.
func (v violations) err() error { return v.errAs(reason.InvalidArgument) }

// errAs is err with reason r in the ErrorInfo, for a rule that has a
// reason of its own (docs/api.md#reasons).
func (v violations) errAs(r string) error {
	if len(v) == 0 {
		return nil
	}
	msg := fmt.Sprintf("invalid %s: %s", v[0].Field, v[0].Description)
	return reason.Error(codes.InvalidArgument, r, msg, &errdetails.BadRequest{FieldViolations: v})
}

func (v *violations) checkUsername(field, username string) {
	if !usernameRE.MatchString(username) {
		v.add(field, "must be 3 to 64 characters of a-z, 0-9, '.', '_' and '-'")
	}
}

func (v *violations) checkPassword(field, password string) {
	if n := len(password); n < minPasswordBytes || n > maxPasswordBytes {
		v.add(field, fmt.Sprintf("must be %d to %d bytes, got %d", minPasswordBytes, maxPasswordBytes, n))
	}
}

func (v *violations) checkPlan(field, plan string) {
	if !planRE.MatchString(plan) {
		v.add(field, "must be 1 to 64 characters of a-z, 0-9 and '-'")
	}
}

// checkID accepts only the canonical 36-character UUID form and returns it in
// lower case, the form the database answers with.
func (v *violations) checkID(field, id string) string {
	if len(id) != 36 {
		v.add(field, "must be a UUID")
		return id
	}
	u, err := uuid.Parse(id)
	if err != nil {
		v.add(field, "must be a UUID")
		return id
	}
	return u.String()
}

// checkPageSize applies the page_size rules of docs/api.md.
func (v *violations) checkPageSize(field string, size int32) int {
	switch {
	case size < 0:
		v.add(field, "must not be negative")
		return 0
	case size == 0:
		return defaultPageSize
	case size > maxPageSize:
		return maxPageSize
	default:
		return int(size)
	}
}
