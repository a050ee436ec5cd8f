package loginthrottle_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/server/loginthrottle"
)

// A Login handler begins an attempt before any lookup or hash, answers the
// error of a throttled one at once, and ends the others with their result.
// The failures of one caller (API key) throttle that caller alone.
func Example() {
	logins := loginthrottle.New(2, 15*time.Minute)
	login := func(ctx context.Context, username, caller string, ok bool) error {
		attempt, err := logins.Begin(ctx, username, caller)
		if err != nil {
			return err
		}
		result := loginthrottle.Undecided
		defer func() { attempt.End(ctx, result) }()
		// ... look the account up and verify the password ...
		if !ok {
			result = loginthrottle.Failed
			return fmt.Errorf("invalid username or password")
		}
		result = loginthrottle.Succeeded
		return nil
	}
	ctx := context.Background()
	for range 3 {
		err := login(ctx, "alice", "billing-svc", false)
		fmt.Println(status.Code(err), err)
	}
	fmt.Println(login(ctx, "alice", "shop-svc", true))
	// Output:
	// Unknown invalid username or password
	// Unknown invalid username or password
	// ResourceExhausted rpc error: code = ResourceExhausted desc = too many failed logins for this username; retry later
	// <nil>
}
