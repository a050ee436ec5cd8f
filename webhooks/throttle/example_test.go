package throttle_test

import (
	"errors"
	"fmt"

	"github.com/shebasvc/sheba/webhooks/throttle"
)

func ExampleThrottle() {
	th := throttle.New()
	send := func() error { return errors.New("503") } // a backend that is down
	sent := 0
	for range 100 {
		if !th.Allow() {
			continue // held back locally: try again later
		}
		sent++
		if send() == nil {
			th.Accepted()
		}
	}
	fmt.Println(sent < 100)
	// Output: true
}
