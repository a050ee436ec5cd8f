package store

import (
	"context"
	"fmt"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// OpenPool returns a pool of at most maxConns connections to the database at
// url, with a span for every query traced to tp (db.system postgresql; the
// statement is recorded, its arguments never are). It connects lazily, so it
// succeeds while Postgres is down.
func OpenPool(ctx context.Context, url string, maxConns int32, tp trace.TracerProvider) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.MaxConns = maxConns
	// With tracing off there is no tracer at all: otelpgx would still
	// run on every query against a no-op provider.
	if _, off := tp.(tracenoop.TracerProvider); !off {
		cfg.ConnConfig.Tracer = otelpgx.NewTracer(
			otelpgx.WithTracerProvider(tp),
			// otelpgx follows the newer conventions (db.system.name); the
			// older db.system key is what many backends still query.
			otelpgx.WithTracerAttributes(attribute.String("db.system", "postgresql")),
			// Query metrics come from sheba_db_pool_*, not from the tracer.
			otelpgx.WithMeterProvider(metricnoop.NewMeterProvider()),
		)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}
