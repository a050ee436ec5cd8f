package retryafter_test

import (
	"fmt"
	"time"

	"github.com/shebasvc/sheba/interceptors/retryafter"
)

// A wait is told in whole seconds, rounded up, and never less than one.
func ExampleSeconds() {
	for _, wait := range []time.Duration{0, 200 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		fmt.Println(wait, retryafter.Seconds(wait))
	}
	// Output:
	// 0s 1
	// 200ms 1
	// 1s 1
	// 1.5s 2
}
