package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinel errors. Test for them with errors.Is: they come wrapped with the
// operation that failed.
var (
	// ErrNotFound means the row asked for, or a row it refers to, does not
	// exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the write would break a uniqueness rule, such as a
	// taken username or a second active subscription.
	ErrConflict = errors.New("conflict")
)

// Postgres error codes the store turns into sentinels
// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeInvalidTextRep      = "22P02"
)

// Store reads and writes sheba's tables. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store that runs its queries on pool. The caller keeps
// ownership of pool and closes it after the last use of the Store.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Ping checks that the database answers a query.
func (s *Store) Ping(ctx context.Context) error {
	// Pool.Ping only checks that a connection can be acquired; a query also
	// proves the server is serving.
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// translate turns the database errors that callers act on into sentinels and
// returns every other error unchanged.
//
// Each code means one thing in this schema: a unique violation is a taken
// username or a second active subscription, a foreign key violation an
// unknown account, and invalid text representation a malformed uuid, which
// cannot name an existing row. The constraint name is kept for the logs.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case codeUniqueViolation:
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	case codeForeignKeyViolation:
		return fmt.Errorf("%w: %s", ErrNotFound, pgErr.ConstraintName)
	case codeInvalidTextRep:
		return fmt.Errorf("%w: %s", ErrNotFound, pgErr.Message)
	}
	return err
}
