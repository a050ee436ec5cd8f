package protovalidate_test

import (
	"context"
	"fmt"

	pv "buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/protovalidate"
)

// A request that breaks the constraints of its proto is answered
// InvalidArgument, every violated field named, and the handler never runs.
func Example() {
	v, err := pv.New(pv.WithMessages(&shebav1.CreateSubscriptionRequest{}), pv.WithDisableLazy())
	if err != nil {
		panic(err)
	}
	interceptor := protovalidate.UnaryServerInterceptor(v)
	info := &grpc.UnaryServerInfo{FullMethod: shebav1.SubscriptionService_CreateSubscription_FullMethodName}
	req := &shebav1.CreateSubscriptionRequest{AccountId: "42", Plan: "Pro!"}
	_, err = interceptor(context.Background(), req, info, func(context.Context, any) (any, error) {
		panic("not reached")
	})
	st := status.Convert(err)
	fmt.Println(st.Code())
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, f := range br.GetFieldViolations() {
				fmt.Printf("%s: %s\n", f.GetField(), f.GetDescription())
			}
		}
	}
	// Output:
	// InvalidArgument
	// account_id: must be a valid UUID
	// plan: does not match regex pattern `^[a-z0-9-]{1,64}$`
}
