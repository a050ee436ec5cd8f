package protovalidate_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	pv "buf.build/go/protovalidate"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/interceptortest"
	"github.com/shebasvc/sheba/interceptors/protovalidate"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server"
)

const id = "00000000-0000-4000-8000-000000000001"

// newValidator is a validator built for the requests the tests send, as
// the chain's is for every request of the API.
func newValidator(t *testing.T) pv.Validator {
	t.Helper()
	v, err := pv.New(pv.WithMessages(&shebav1.CreateSubscriptionRequest{}, &shebav1.CreateWebhookEndpointRequest{},
		&shebav1.CreateAccountRequest{}, &shebav1.ListSubscriptionsRequest{}), pv.WithDisableLazy())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// answer is what a client reads of an error: its code, message, the
// reasons of its ErrorInfo and the fields of its BadRequest.
type answer struct {
	Code    codes.Code
	Message string
	Reasons []string
	Fields  []string
}

func answerOf(err error) answer {
	st := status.Convert(err)
	a := answer{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			a.Reasons = append(a.Reasons, d.GetReason())
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				a.Fields = append(a.Fields, v.GetField())
			}
		}
	}
	return a
}

func TestDirect(t *testing.T) {
	t.Parallel()
	link := protovalidate.UnaryServerInterceptor(newValidator(t))
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.SubscriptionService/CreateSubscription"}
	types := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprint("type-", i)
		}
		return s
	}
	for _, test := range []struct {
		name string
		req  any
		want answer // zero: valid, the handler runs
	}{
		{"valid", &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}, answer{}},
		{"upper-case id", &shebav1.CreateSubscriptionRequest{AccountId: strings.ToUpper(id), Plan: "pro"}, answer{}},
		{"no plan filter", &shebav1.ListSubscriptionsRequest{}, answer{}},
		{"every field bad", &shebav1.CreateSubscriptionRequest{AccountId: "42", Plan: "Pro!"}, answer{
			Code: codes.InvalidArgument, Message: "invalid account_id: must be a valid UUID",
			Reasons: []string{reason.InvalidArgument}, Fields: []string{"account_id", "plan"},
		}},
		{"fields in the message's order", &shebav1.ListSubscriptionsRequest{PageSize: -1, Plan: "Pro!"}, answer{
			Code: codes.InvalidArgument, Message: "invalid page_size: must be greater than or equal to 0",
			Reasons: []string{reason.InvalidArgument}, Fields: []string{"page_size", "plan"},
		}},
		{"a field once, with its first rule", &shebav1.CreateAccountRequest{Username: "alice", Password: "short"}, answer{
			Code: codes.InvalidArgument, Message: "invalid password: must be at least 8 bytes",
			Reasons: []string{reason.InvalidArgument}, Fields: []string{"password"},
		}},
		// An item not in the list and an item listed twice, named by
		// index in order; description and url once each.
		{"items", &shebav1.CreateWebhookEndpointRequest{
			Url:         "ftp://example.com/hook",
			EventTypes:  []string{"account.created", "account.deleted", "account.created"},
			Description: strings.Repeat("d", 257),
		}, answer{
			Code: codes.InvalidArgument, Reasons: []string{reason.InvalidArgument},
			Message: "invalid url: does not match regex pattern `^[Hh][Tt][Tt][Pp][Ss]?://[^@/?#:][^@/?#]*([/?][^#]*)?#?$`",
			Fields:  []string{"url", "event_types[1]", "event_types[2]", "description"},
		}},
		{"nothing set", &shebav1.CreateWebhookEndpointRequest{}, answer{
			Code: codes.InvalidArgument, Message: "invalid url: value is required",
			Reasons: []string{reason.InvalidArgument}, Fields: []string{"url", "event_types"},
		}},
		// Over max_items (which the chain's bounds link refuses before):
		// at most reason.MaxViolations.
		{"many", &shebav1.CreateWebhookEndpointRequest{Url: "https://example.com/", EventTypes: types(20)}, answer{
			Code: codes.InvalidArgument, Message: fmt.Sprintf("invalid event_types: must contain no more than %d item(s)", len(server.EventTypes())),
			Reasons: []string{reason.InvalidArgument},
			Fields: []string{"event_types", "event_types[0]", "event_types[1]", "event_types[2]", "event_types[3]",
				"event_types[4]", "event_types[5]", "event_types[6]"},
		}},
	} {
		t.Run(test.name, func(t *testing.T) {
			ran := false
			handler := func(context.Context, any) (any, error) { ran = true; return "ok", nil }
			_, err := link(t.Context(), test.req, info, handler)
			if diff := cmp.Diff(test.want, answerOf(err)); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if valid := test.want.Code == codes.OK; ran != valid {
				t.Errorf("the handler ran: %t, want %t", ran, valid)
			}
		})
	}
}

// TestAnswerable checks that an answer is always marshalable, whatever the
// request holds: text that is not UTF-8 (which a message decoded from the
// wire cannot hold, but one made in process can) is never quoted as it
// is.
func TestAnswerable(t *testing.T) {
	t.Parallel()
	err := protovalidate.Check(t.Context(), newValidator(t), &shebav1.CreateWebhookEndpointRequest{
		Url: "https://example.com/\xff", EventTypes: []string{"\xff", "\xff"}, Description: strings.Repeat("\xff", 300),
	})
	if got := answerOf(err); got.Code != codes.InvalidArgument || len(got.Fields) == 0 {
		t.Fatalf("got %v, want InvalidArgument with violations", err)
	}
	if _, err := proto.Marshal(status.Convert(err).Proto()); err != nil {
		t.Errorf("the answer does not marshal: %v", err)
	}
}

// TestInternal checks what the validator's own failures answer: Internal,
// logged once each, never InvalidArgument.
func TestInternal(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	link := protovalidate.UnaryServerInterceptor(newValidator(t), protovalidate.WithLogger(log))
	for _, req := range []any{
		&emptypb.Empty{}, // a message the validator was not built for
		"not a message",
	} {
		ran := false
		_, err := link(t.Context(), req, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) { ran = true; return nil, nil })
		if got := answerOf(err); got.Code != codes.Internal || got.Message != "internal error" || ran {
			t.Errorf("%T: got %v (handler ran: %t), want Internal \"internal error\"", req, err, ran)
		}
	}
	if n := strings.Count(logs.String(), "validate request"); n != 2 {
		t.Errorf("logged %d failures, want 2:\n%s", n, logs.String())
	}
}

// subscriptions is a SubscriptionService whose CreateSubscription
// succeeds.
type subscriptions struct {
	shebav1.UnimplementedSubscriptionServiceServer
}

func (subscriptions) CreateSubscription(context.Context, *shebav1.CreateSubscriptionRequest) (*shebav1.CreateSubscriptionResponse, error) {
	return &shebav1.CreateSubscriptionResponse{}, nil
}

func TestServer(t *testing.T) {
	t.Parallel()
	conn := interceptortest.ServeServices(t, []grpc.ServerOption{grpc.UnaryInterceptor(protovalidate.UnaryServerInterceptor(newValidator(t)))},
		func(r grpc.ServiceRegistrar) { shebav1.RegisterSubscriptionServiceServer(r, subscriptions{}) })
	client := shebav1.NewSubscriptionServiceClient(conn)
	if _, err := client.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}); err != nil {
		t.Errorf("valid: %v", err)
	}
	_, err := client.CreateSubscription(t.Context(), &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "Pro!"})
	want := answer{Code: codes.InvalidArgument, Message: "invalid plan: does not match regex pattern `^[a-z0-9-]{1,64}$`",
		Reasons: []string{reason.InvalidArgument}, Fields: []string{"plan"}}
	if diff := cmp.Diff(want, answerOf(err)); diff != "" {
		t.Errorf("invalid (-want +got):\n%s", diff)
	}
}

// TestSameAnswers sends requests that break the same rules again and
// again, mixed with others: each is answered as the first time (the
// answers are cached), and requests that break other rules are answered
// their own.
func TestSameAnswers(t *testing.T) {
	t.Parallel()
	link := protovalidate.UnaryServerInterceptor(newValidator(t))
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/CreateAccount"}
	reqs := []*shebav1.CreateAccountRequest{
		{Username: "NOT VALID!", Password: "bench-password"},
		{Username: "valid", Password: "short"},
		{Username: "NOT VALID!", Password: "short"},
		{Username: "valid", Password: strings.Repeat("p", 300)},
	}
	var first []*status.Status
	for round := range 3 {
		for i, req := range reqs {
			_, err := link(t.Context(), req, info, func(context.Context, any) (any, error) {
				t.Fatal("an invalid request reached the handler")
				return nil, nil
			})
			st := status.Convert(err)
			if round == 0 {
				for j, other := range first {
					if proto.Equal(st.Proto(), other.Proto()) {
						t.Errorf("requests %d and %d, which break different rules, got the same answer %v", j, i, st.Proto())
					}
				}
				first = append(first, st)
				continue
			}
			if !proto.Equal(st.Proto(), first[i].Proto()) {
				t.Errorf("round %d, request %d: got %v, want %v as the first time", round, i, st.Proto(), first[i].Proto())
			}
		}
	}
}
