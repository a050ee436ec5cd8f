package app

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"
	_ "google.golang.org/grpc/encoding/gzip" // the gzip compressor for gRPC
	"google.golang.org/grpc/grpclog"

	"github.com/shebasvc/sheba/codec/grpczstd"
)

// Prepare makes the process-wide settings of a sheba process, once, before
// any App or gRPC client exists: the zstd compressor of gRPC (gzip
// registers itself), go-redis's own log silenced (it prints every failed
// dial, while the rate limits report an outage once, in the service's log:
// docs/observability.md#logs), and, when grpcLog is not nil, grpc-go's own
// log lines sent to it as slog records with logger=grpc.
func Prepare(grpcLog *slog.Logger) {
	grpczstd.Register()
	redis.SetLogger(discardRedisLog{})
	if grpcLog != nil {
		grpclog.SetLoggerV2(newGRPCLogger(grpcLog))
	}
}

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}
