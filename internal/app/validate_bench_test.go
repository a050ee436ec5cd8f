package app

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/protovalidate"
)

// BenchmarkValidation measures the chain's validation link alone, with the
// validator the chain is built with (newValidator), around a no-op
// handler: a valid request of several methods, then an invalid one (the
// error path, which builds the BadRequest).
func BenchmarkValidation(b *testing.B) {
	runBenchCases(b, validationBenchCases(b))
}

// validationBenchCases are BenchmarkValidation's rows.
func validationBenchCases(tb testing.TB) []benchCase {
	v, err := newValidator()
	if err != nil {
		tb.Fatal(err)
	}
	link := protovalidate.UnaryServerInterceptor(v)
	const id = "00000000-0000-4000-8000-000000000001"
	var cases []benchCase
	for _, c := range []struct {
		name  string
		req   proto.Message
		valid bool
	}{
		{"CreateSubscription", &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"}, true},
		{"GetAccount", &shebav1.GetAccountRequest{AccountId: id}, true},
		{"CreateAccount", &shebav1.CreateAccountRequest{Username: "alice", Password: "correct horse"}, true},
		{"ListSubscriptions", &shebav1.ListSubscriptionsRequest{PageSize: 10, Plan: "pro"}, true},
		{"CreateWebhookEndpoint", &shebav1.CreateWebhookEndpointRequest{
			Url:        "https://hooks.example.com/sheba",
			EventTypes: []string{"account.created", "subscription.created", "subscription.canceled"},
		}, true},
		{"CreateSubscription-invalid", &shebav1.CreateSubscriptionRequest{AccountId: "42", Plan: "Pro!"}, false},
	} {
		info := &grpc.UnaryServerInfo{FullMethod: "/bench/" + c.name}
		cases = append(cases, benchCase{c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				_, err := link(ctx, c.req, info, noopHandler)
				if (err == nil) != c.valid || (err != nil && status.Code(err) != codes.InvalidArgument) {
					b.Fatalf("%s: %v", c.name, err)
				}
			}
		}})
	}
	return cases
}
