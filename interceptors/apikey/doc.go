// Package apikey authenticates callers by API key.
//
// A key arrives in the x-api-key metadata (an HTTP header on REST) or as
// "authorization: Bearer <key>". Only the SHA-256 of each key is configured;
// the presented key is hashed and compared in constant time against every
// configured hash. The matching key's id becomes the caller identity, read
// with IDFromContext, for metrics, logs and traces; the key itself is never
// kept.
//
// Authenticator.Authenticate has the shape of go-grpc-middleware's
// auth.AuthFunc: wire it with auth.UnaryServerInterceptor. It must sit before
// anything that uses the caller identity (per-key rate limits, metrics
// labels). Methods listed as public skip the key check: they answer without
// a key, and a valid key still identifies its caller. Known and Public ask
// the same check without a call and without counting a rejection, for a
// guard in front of the chain: the REST gateway reads no body of a call
// that the chain will refuse. AuthenticateMetadata is the check of a gRPC
// call before grpc-go reads its message (the gRPC server's tap): it
// refuses and counts as Authenticate does, and leaves the caller it found
// in the context, where Authenticate takes it without hashing the key
// again.
//
// Codes: Unauthenticated for a missing key (reason API_KEY_MISSING), and for
// a malformed or unknown one (API_KEY_INVALID).
package apikey
