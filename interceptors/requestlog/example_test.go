package requestlog_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shebasvc/sheba/interceptors/requestlog"
)

// One line per call, with the caller's request id and the final code.
func Example() {
	// Drop the time and duration so the output is the same on every run.
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		},
	}))
	interceptor := requestlog.UnaryServerInterceptor(log)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "req-42"))
	info := &grpc.UnaryServerInfo{FullMethod: "/sheba.v1.AccountService/GetAccount"}
	_, err := interceptor(ctx, nil, info, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.NotFound, "account not found")
	})
	fmt.Println(status.Code(err))
	// Output:
	// level=INFO msg=request method=/sheba.v1.AccountService/GetAccount transport=grpc code=NotFound request_id=req-42 api_key_id="" peer="" error="account not found"
	// NotFound
}
