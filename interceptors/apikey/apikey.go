package apikey

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/shebasvc/sheba/interceptors/callinfo"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// The request metadata that carry the key: x-api-key, else authorization
// as "Bearer <key>". The REST gateway passes both headers there.
const (
	MetadataKey      = "x-api-key"
	AuthorizationKey = "authorization"
)

// CarriesKey reports whether a request header or metadata name carries an
// API key: x-api-key or authorization, in any case, also in the
// Grpc-Metadata- form through which REST clients send metadata. Nothing
// outside the chain's own check may be told such a header.
func CarriesKey(name string) bool {
	name = strings.ToLower(name)
	name = strings.TrimPrefix(name, "grpc-metadata-")
	return name == MetadataKey || name == AuthorizationKey
}

// Key is a configured API key: its caller id and the SHA-256 of the key.
type Key struct {
	ID     string
	SHA256 [sha256.Size]byte
}

// ParseKey makes a Key from an id and a hex SHA-256.
func ParseKey(id, sha256Hex string) (Key, error) {
	b, err := hex.DecodeString(sha256Hex)
	if err != nil || len(b) != sha256.Size {
		return Key{}, fmt.Errorf("api key %q: sha256 must be 64 hex digits", id)
	}
	k := Key{ID: id}
	copy(k.SHA256[:], b)
	return k, nil
}

// Authenticator checks API keys. It is safe for concurrent use.
type Authenticator struct {
	keys     []Key
	public   map[string]bool
	onReject func(ctx context.Context)
}

type options struct {
	onReject func(ctx context.Context)
}

// Option configures an Authenticator.
type Option func(*options)

// WithOnReject calls f for every call rejected as unauthenticated (for a
// rejection counter).
func WithOnReject(f func(ctx context.Context)) Option {
	return func(o *options) { o.onReject = f }
}

// New returns an Authenticator for keys. public lists full method names
// ("/sheba.v1.PingService/Ping") that need no key.
func New(keys []Key, public []string, opts ...Option) *Authenticator {
	o := options{onReject: func(context.Context) {}}
	for _, opt := range opts {
		opt(&o)
	}
	a := &Authenticator{
		keys:     append([]Key(nil), keys...),
		public:   make(map[string]bool, len(public)),
		onReject: o.onReject,
	}
	for _, m := range public {
		a.public[m] = true
	}
	return a
}

var (
	errMissing   = reason.Error(codes.Unauthenticated, reason.APIKeyMissing, "missing API key: send it in x-api-key or as authorization: Bearer <key>")
	errMalformed = reason.Error(codes.Unauthenticated, reason.APIKeyInvalid, "malformed authorization: want Bearer <key>")
	errUnknown   = reason.Error(codes.Unauthenticated, reason.APIKeyInvalid, "invalid API key")
)

type idKey struct{}

// IDFromContext returns the id of the caller's API key, or "" for a call
// without one (a public method).
func IDFromContext(ctx context.Context) string {
	if ci := callinfo.FromContext(ctx); ci != nil && ci.CallerID != "" {
		return ci.CallerID
	}
	if k, ok := ctx.Value(idKey{}).(*Key); ok {
		return k.ID
	}
	return ""
}

// Authenticate identifies the caller of the call in ctx and returns ctx with
// the caller id. It has the shape of go-grpc-middleware's auth.AuthFunc. A
// caller that AuthenticateMetadata found already, and left in ctx, is taken
// as it is: the key is neither read nor hashed again.
func (a *Authenticator) Authenticate(ctx context.Context) (context.Context, error) {
	k, tapped := ctx.Value(idKey{}).(*Key)
	if !tapped {
		method, _ := grpc.Method(ctx)
		key, err := keyFromMetadata(ctx)
		if k, err = a.identify(ctx, key, err, a.public[method]); err != nil {
			return nil, err
		}
		if k == nil {
			// A public method's caller without a valid key.
			return ctx, nil
		}
	}
	if ci := callinfo.FromContext(ctx); ci != nil {
		// A call of the chain: its Info carries the caller, without a
		// context of its own.
		ci.CallerID = k.ID
		return ctx, nil
	}
	if tapped {
		return ctx, nil
	}
	// A pointer into keys: storing it in the context allocates nothing
	// beyond the context.
	return context.WithValue(ctx, idKey{}, k), nil
}

// AuthenticateMetadata is Authenticate for a call that has not started: a
// call of method (a full method name) whose request metadata are md, as
// grpc-go's tap hands them over before it reads the message
// (grpc.InTapHandle). The key is read from md as Authenticate reads it from
// the call's metadata, and a rejection is counted (WithOnReject) and
// answered with the same error. It returns ctx with the caller, which
// Authenticate then takes without hashing the key again. A public method's
// call is returned as it is, unread: Authenticate identifies its caller, if
// any, and never refuses it. It makes no I/O, and allocates only the
// context it returns.
func (a *Authenticator) AuthenticateMetadata(ctx context.Context, method string, md metadata.MD) (context.Context, error) {
	if a.public[method] {
		return ctx, nil
	}
	// grpc-go's transport keys the metadata in lower case, as the
	// constants are.
	key, err := keyFrom(first(md[MetadataKey]), first(md[AuthorizationKey]))
	k, err := a.identify(ctx, key, err, false)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, idKey{}, k), nil
}

// identify returns the configured key of key, which was read with err, for
// a call of a public method or not. A call of a public method without a
// valid key gets neither key nor error; any other such call is counted as
// rejected (WithOnReject) and gets the error.
func (a *Authenticator) identify(ctx context.Context, key string, err error, public bool) (*Key, error) {
	if err == nil {
		if k := a.lookup(key); k != nil {
			return k, nil
		}
		err = errUnknown
	}
	if public {
		return nil, nil
	}
	a.onReject(ctx)
	return nil, err
}

// lookup returns the configured key that matches key, or nil. Every configured hash is compared, in
// constant time, whatever matches, so the timing says nothing about which
// or how many keys exist.
func (a *Authenticator) lookup(key string) *Key {
	// Keys of usual length are hashed from a buffer on the stack: converting
	// the string would allocate for any key over 32 bytes.
	var buf [128]byte
	sum := sha256.Sum256(append(buf[:0], key...))
	found := -1
	for i := range a.keys {
		if subtle.ConstantTimeCompare(sum[:], a.keys[i].SHA256[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &a.keys[found]
}

// Known reports whether the credentials hold a configured key, read as
// Authenticate reads them: apiKey and authorization are the first values of
// x-api-key and authorization. Unlike Authenticate it counts no rejection:
// it is for a guard in front of the chain (the REST gateway checks the key
// from the headers before it reads a body), whose call the chain then
// authenticates, and rejects and counts if need be.
func (a *Authenticator) Known(apiKey, authorization string) bool {
	key, err := keyFrom(apiKey, authorization)
	return err == nil && a.lookup(key) != nil
}

// Verdict is what a guard in front of the chain found of a request's
// credentials (Check): the configured key they hold, if any. A guard that
// answers Verdict.ContextValue from its context's Value hands the chain
// the caller it found, and Authenticate takes it as it takes the gRPC
// tap's (AuthenticateMetadata): the key is not hashed again. Only Check
// makes a Verdict that holds a key, and the context key it answers is of
// a type of this package, so nothing a client sends can stand for one.
type Verdict struct{ key *Key }

// Check reads the credentials as Known does and returns the key they hold.
// Like Known it counts no rejection.
func (a *Authenticator) Check(apiKey, authorization string) Verdict {
	key, err := keyFrom(apiKey, authorization)
	if err != nil {
		return Verdict{}
	}
	return Verdict{key: a.lookup(key)}
}

// Known reports whether the credentials held a configured key.
func (v Verdict) Known() bool { return v.key != nil }

// ContextValue returns what a context that carries v answers for key: the
// caller, and true, for the key Authenticate asks for when v holds a key;
// false for any other key, which the context answers as it would without
// v. A context carries it for the one call whose credentials were checked.
func (v Verdict) ContextValue(key any) (any, bool) {
	if v.key != nil && key == (idKey{}) {
		return v.key, true
	}
	return nil, false
}

// Public reports whether method (a full method name) is callable without a
// key.
func (a *Authenticator) Public(method string) bool { return a.public[method] }

// keyFromMetadata reads the key from the first x-api-key, else from the
// first authorization.
func keyFromMetadata(ctx context.Context) (string, error) {
	// ValueFromIncomingContext reads one key without copying all metadata.
	if apiKey := first(metadata.ValueFromIncomingContext(ctx, MetadataKey)); apiKey != "" {
		return apiKey, nil
	}
	// Only then, as keyFrom reads it: the lookup of a missing key compares
	// it with every key of the call's metadata.
	return keyFrom("", first(metadata.ValueFromIncomingContext(ctx, AuthorizationKey)))
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// keyFrom reads the key from apiKey, else from authorization as "Bearer
// <key>" (the scheme in any case, as go-grpc-middleware's auth.AuthFromMD
// reads it; that reads only from a context, which the gateway's guard has
// not yet made).
func keyFrom(apiKey, authorization string) (string, error) {
	if apiKey != "" {
		return apiKey, nil
	}
	if authorization == "" {
		return "", errMissing
	}
	scheme, token, found := strings.Cut(authorization, " ")
	key := strings.TrimSpace(token)
	if !found || !strings.EqualFold(scheme, "bearer") || key == "" {
		return "", errMalformed
	}
	return key, nil
}
