package webhooks_test

import (
	"fmt"

	"github.com/shebasvc/sheba/webhooks"
)

func ExampleSign() {
	id, ts, body := "msg_p5jXN8AQM9LWM0D4loKWxJek", int64(1614265330), []byte(`{"test": 2432232314}`)
	sig, err := webhooks.Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, id, ts, body)
	if err != nil {
		panic(err)
	}
	fmt.Println(sig)
	// After a rotation, until the overlap ends: the new secret first.
	sig, err = webhooks.Sign([]string{"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, id, ts, body)
	if err != nil {
		panic(err)
	}
	fmt.Println(sig)
	// Output:
	// v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	// v1,78nXHjpFP0tVJQW5D0SBwmVyyW87BV/rL6MgfM/Bw44= v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}
