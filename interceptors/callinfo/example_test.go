package callinfo_test

import (
	"context"
	"fmt"

	"github.com/shebasvc/sheba/interceptors/callinfo"
)

// The outermost interceptor puts an Info in the context, an inner one fills
// it in, and the outer one reads it once the call is done.
func Example() {
	outer := func(ctx context.Context, inner func(context.Context)) {
		info := &callinfo.Info{RequestID: "req-1"}
		inner(callinfo.NewContext(ctx, info))
		fmt.Println(info.RequestID, info.CallerID)
	}
	outer(context.Background(), func(ctx context.Context) {
		// Authentication learns who calls.
		callinfo.FromContext(ctx).CallerID = "billing"
	})
	// Output: req-1 billing
}
