// Package health knows whether sheba can serve: a Checker pings Postgres on
// an interval and is the one truth behind both grpc.health.v1 (for "" and
// every sheba.v1 service, Watch included, as grpc_health_probe and
// Kubernetes use it) and GET /readyz.
//
// A database that has answered counts as down only after two missed pings
// in a row, so one slow ping under load does not turn a replica away. At
// shutdown every status turns NOT_SERVING for good and Watch streams end, so
// they do not hold the drain (docs/operations.md#health).
package health
