package gradient_test

import (
	"fmt"
	"time"

	"github.com/shebasvc/sheba/interceptors/concurrency"
	"github.com/shebasvc/sheba/interceptors/concurrency/gradient"
)

// The limit starts at its minimum and grows while the latency of the calls
// holds; the concurrency interceptor takes it like the fixed limit.
func Example() {
	l := gradient.New(8, 64)
	_ = concurrency.UnaryServerInterceptor(l)

	now := time.Unix(0, 0)
	for range 50 { // 50 windows of 20 calls, 8 in flight, 10 ms each
		for range 20 {
			now = now.Add(5 * time.Millisecond)
			l.Observe(now, 10*time.Millisecond, int64(l.Limit()))
		}
	}
	fmt.Println(l.Limit())
	// Output: 64
}
