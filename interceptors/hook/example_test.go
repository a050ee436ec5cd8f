package hook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/hook"
)

// A hook that refuses every CreateSubscription: the call answers the
// hook's status, and its handler never runs.
func Example() {
	policy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"control":{"break":403},"message":"plans are closed in this region","reason":"REGION_CLOSED"}`)
	}))
	defer policy.Close()
	client, err := hook.NewHTTPClient(policy.URL, hook.HTTPOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	interceptor := hook.UnaryServerInterceptor(client, hook.WithMethods("/sheba.v1.SubscriptionService/CreateSubscription"))
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.SubscriptionService/CreateSubscription"}
	_, err = interceptor(context.Background(), &shebav1.CreateSubscriptionRequest{Plan: "pro"}, info, func(context.Context, any) (any, error) {
		fmt.Println("handler ran")
		return &shebav1.CreateSubscriptionResponse{}, nil
	})
	st := status.Convert(err)
	fmt.Println(st.Code(), st.Message())
	// Output: PermissionDenied plans are closed in this region
}
