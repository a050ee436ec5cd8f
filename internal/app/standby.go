package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/interceptors/standby"
	"github.com/shebasvc/sheba/server"
	"github.com/shebasvc/sheba/store"
)

// openStandby opens the pool of the read-only methods on
// database.read_url, or returns nil when it is not set
// (docs/operations.md#reading-from-standbys). Its queries are traced and
// bounded like the API's pool's; its connections are cut like the others
// by a shutdown out of time.
func openStandby(ctx context.Context, cfg config.Config, tp trace.TracerProvider, conns *store.Canceler) (*store.Standby, error) {
	if cfg.Database.ReadURL == "" {
		return nil, nil
	}
	s, err := store.OpenStandby(ctx, cfg.Database.ReadURL, cfg.Database.ReadMaxConns, tp,
		store.WithStatementTimeout(cfg.Limits.Timeout), store.WithCanceler(conns))
	if err != nil {
		return nil, fmt.Errorf("database.read_url: %w", err)
	}
	return s, nil
}

// newStandbyLink returns the chain's link that runs the read-only methods
// on s, with its metrics registered in reg, and the methods that failfast
// answers at once while the primary is down (primaryUp false): every one
// that needs the database but those the link answers for itself, on the
// standby. It remembers the writes of each key of keyIDs for
// database.read_max_lag. When s is nil (no read_url) the chain has no
// such link, and nothing costs anything.
func newStandbyLink(s *store.Standby, c config.Database, keyIDs []string, primaryUp func() bool, log *slog.Logger, reg prometheus.Registerer) (_ grpc.UnaryServerInterceptor, failfast map[string]bool, _ error) {
	failfast = server.DatabaseMethods()
	if s == nil {
		return nil, failfast, nil
	}
	m := standby.NewMetrics()
	for _, col := range []prometheus.Collector{m, s.Collector()} {
		if err := reg.Register(col); err != nil {
			return nil, nil, fmt.Errorf("metrics: %w", err)
		}
	}
	methods := standby.Methods{ReadOnly: server.ReadOnlyMethods(), Writes: server.WriteMethods()}
	for method := range methods.ReadOnly {
		delete(failfast, method)
	}
	link := standby.UnaryServerInterceptor(s, methods, apikey.IDFromContext,
		standby.WithMaxLag(c.ReadMaxLag), standby.WithCallers(keyIDs...), standby.WithMetrics(m), standby.WithLogger(log),
		standby.WithPrimaryDown(primaryUp, reason.OutcomeDatabaseDown.Err()))
	return link, failfast, nil
}

// databasePools returns the pools by the name of their pool label in
// sheba_db_pool_*: the standby's only when database.read_url is set.
func (a *App) databasePools() map[string]*pgxpool.Pool {
	pools := map[string]*pgxpool.Pool{store.PoolPrimary: a.pool, store.PoolRiver: a.hooksPool}
	if a.standby != nil {
		pools[store.PoolStandby] = a.standby.Pool()
	}
	return pools
}
