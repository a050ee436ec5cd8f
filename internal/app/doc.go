// Package app assembles sheba: it builds every part from its own config
// section (the database pools, the store, the services, the interceptor
// chain, the gRPC server, the REST gateway, the health checker, the
// webhook runner and the rate limits) and owns start and shutdown.
//
// It is the only package that knows every part. The sheba command builds
// an App from the loaded config and serves it; the end-to-end tests
// (package e2e) start the same App, with Options for what they observe,
// so no test runs a copy of the wiring.
//
// Process-wide settings (gRPC's compressors and logger, go-redis's logger)
// are made once by Prepare, before any App is built.
package app
