package server

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/apikey"
	"github.com/shebasvc/sheba/interceptors/reason"
	"github.com/shebasvc/sheba/server/loginthrottle"
	"github.com/shebasvc/sheba/store"
)

// errLoginFailed is the one answer to every failed login, so that a caller
// cannot tell an unknown username from a wrong password.
var errLoginFailed = reason.Error(codes.Unauthenticated, reason.LoginFailed, "invalid username or password")

// accountServer implements shebav1.AccountServiceServer.
type accountServer struct {
	shebav1.UnimplementedAccountServiceServer
	store  *store.Store
	hasher *passwordHasher
	errs   errorMapper
	events Publisher
	logins *loginthrottle.Throttle
}

// accountIDRequest is a request whose one field is an account id:
// GetAccount's, GetSubscription's and CancelSubscription's.
type accountIDRequest interface {
	GetAccountId() string
}

// accountID returns the account id of req in lower case, the form the
// database answers with: the chain's validation (its constraint, a UUID)
// lets upper-case hex through.
func accountID(req accountIDRequest) string { return strings.ToLower(req.GetAccountId()) }

// The handlers below get requests that hold to their constraints (the
// buf.validate rules of their protos): the chain's validation link
// (interceptors/protovalidate) answers the others before any handler runs.

// CreateAccount creates an account. Codes: AlreadyExists.
func (s *accountServer) CreateAccount(ctx context.Context, req *shebav1.CreateAccountRequest) (*shebav1.CreateAccountResponse, error) {
	hash, err := s.hasher.hash(ctx, req.GetPassword())
	if err != nil {
		return nil, s.errs.toStatus(ctx, "create account", err, reason.Own{})
	}
	var account *shebav1.Account
	err = s.store.InTx(ctx, func(ctx context.Context) error {
		a, err := s.store.CreateAccount(ctx, req.GetUsername(), hash)
		if err != nil {
			return err
		}
		account = accountToProto(a)
		return s.events.Publish(ctx, EventAccountCreated, account)
	})
	if err != nil {
		return nil, s.errs.toStatus(ctx, "create account", err, reason.Own{Conflict: errUsernameTaken})
	}
	return &shebav1.CreateAccountResponse{Account: account}, nil
}

// Login checks a username and password. Codes: Unauthenticated,
// ResourceExhausted (LOGIN_THROTTLED).
func (s *accountServer) Login(ctx context.Context, req *shebav1.LoginRequest) (*shebav1.LoginResponse, error) {
	// Before the lookup and the hash: a throttled login costs neither, and
	// is answered alike at once whether the username exists or not. Counted
	// per caller, so that one key's failures never lock out another's.
	attempt, err := s.logins.Begin(ctx, req.GetUsername(), apikey.IDFromContext(ctx))
	if err != nil {
		return nil, s.errs.toStatus(ctx, "login", err, reason.Own{})
	}
	// Deferred, so that a panic below ends the attempt too (counting for
	// nothing) and gives the username's turn on.
	result := loginthrottle.Undecided
	defer func() { attempt.End(ctx, result) }()

	a, err := s.store.GetAccountByUsername(ctx, req.GetUsername())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, s.errs.toStatus(ctx, "login", err, reason.Own{})
	}
	// An unknown username (a.PasswordHash "") is verified against the
	// dummy hash: the same wait for a slot, the same work, the same answer.
	ok, err := s.hasher.verify(ctx, req.GetPassword(), a.PasswordHash)
	if err != nil {
		return nil, s.errs.toStatus(ctx, "login", err, reason.Own{})
	}
	if !ok {
		result = loginthrottle.Failed
		return nil, errLoginFailed
	}
	result = loginthrottle.Succeeded
	return &shebav1.LoginResponse{Account: accountToProto(a)}, nil
}

// GetAccount returns one account. Codes: NotFound.
func (s *accountServer) GetAccount(ctx context.Context, req *shebav1.GetAccountRequest) (*shebav1.GetAccountResponse, error) {
	a, err := s.store.GetAccount(ctx, accountID(req))
	if err != nil {
		return nil, s.errs.toStatus(ctx, "get account", err, reason.Own{NotFound: errAccountNotFound})
	}
	return &shebav1.GetAccountResponse{Account: accountToProto(a)}, nil
}
