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
func Example() {
	logins := loginthrottle.New(2, 15*time.Minute)
	login := func(ctx context.Context, username string, ok bool) error {
		attempt, err := logins.Begin(ctx, username)
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
		err := login(ctx, "alice", false)
		fmt.Println(status.Code(err), err)
	}
	fmt.Println(login(ctx, "bob", true))
	// Output:
	// Unknown invalid username or password
	// Unknown invalid username or password
	// ResourceExhausted rpc error: code = ResourceExhausted desc = too many failed logins for this username; retry later
	// <nil>
}
