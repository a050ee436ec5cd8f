package app

import (
	"context"
	"fmt"
	"log/slog"

	pv "buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/protovalidate"
)

// newValidator returns the one validator of the chain's validation link
// and of the hook's replacement requests, built for the request message of
// every method of the table at once: no call compiles a rule, and a rule
// that cannot compile stops the start.
func newValidator() (pv.Validator, error) {
	var requests []proto.Message
	for _, m := range shebav1.Methods {
		requests = append(requests, m.NewRequest())
	}
	v, err := pv.New(pv.WithMessages(requests...), pv.WithDisableLazy())
	if err != nil {
		return nil, fmt.Errorf("validation rules: %w", err)
	}
	return v, nil
}

// checker returns protovalidate.Check of v, for the hook's replacement
// requests.
func checker(v pv.Validator, log *slog.Logger) func(context.Context, proto.Message) error {
	return func(ctx context.Context, req proto.Message) error {
		return protovalidate.Check(ctx, v, req, protovalidate.WithLogger(log))
	}
}
