// Package e2e holds sheba's system tests: what needs both transports, the
// whole chain and a real Postgres (and Redis, local webhook receivers, a
// Prometheus with the operator pack's rules) at once. Each test starts the
// real assembly (internal/app) on listeners of its own over a database of
// its own, or the built binary through e2e/shebaproc when it sends signals
// or reads the environment as the command does. A package's own rules are
// tested in that package.
package e2e
