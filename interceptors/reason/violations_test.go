package reason_test

import (
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/interceptors/reason"
)

// TestViolations checks the answer to a request's violations: none is no
// error; else InvalidArgument naming the first, one ErrorInfo, at most
// MaxViolations of them, and marshalable whatever the request held.
func TestViolations(t *testing.T) {
	var none reason.Violations
	if err := none.Err(); err != nil {
		t.Errorf("no violations: got %v, want nil", err)
	}
	var v reason.Violations
	for i := range reason.MaxViolations + 3 {
		v.Add(fmt.Sprint("items[", i, "]"), "bad \xff")
	}
	st := status.Convert(v.ErrAs(reason.WebhookURLNotAllowed))
	if st.Code() != codes.InvalidArgument || st.Message() != "invalid items[0]: bad \uFFFD" {
		t.Errorf("got %v %q, want InvalidArgument naming the first", st.Code(), st.Message())
	}
	var infos, fields int
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			infos++
			if d.GetReason() != reason.WebhookURLNotAllowed {
				t.Errorf("reason %s, want %s", d.GetReason(), reason.WebhookURLNotAllowed)
			}
		case *errdetails.BadRequest:
			fields += len(d.GetFieldViolations())
		}
	}
	if infos != 1 || fields != reason.MaxViolations {
		t.Errorf("got %d ErrorInfo and %d violations, want 1 and %d", infos, fields, reason.MaxViolations)
	}
	if _, err := proto.Marshal(st.Proto()); err != nil {
		t.Errorf("the answer does not marshal: %v", err)
	}
}
