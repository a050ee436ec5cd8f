package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Account is a row of the accounts table.
type Account struct {
	ID           string
	Username     string
	PasswordHash string
	CreateTime   time.Time
}

// scanAccount reads the columns id, username, password_hash, create_time.
func scanAccount(row pgx.CollectableRow) (Account, error) {
	var a Account
	if err := row.Scan(&a.ID, &a.Username, &a.PasswordHash, &a.CreateTime); err != nil {
		return Account{}, err
	}
	a.CreateTime = a.CreateTime.UTC()
	return a, nil
}

// CreateAccount inserts an account and returns it with its new id. It returns
// ErrConflict if the username is taken.
func (s *Store) CreateAccount(ctx context.Context, username, passwordHash string) (Account, error) {
	// Errors from Query surface through rows; the Collect functions return them.
	rows, _ := s.db(ctx).Query(ctx, `
		INSERT INTO accounts (username, password_hash)
		VALUES ($1, $2)
		RETURNING id, username, password_hash, create_time`,
		username, passwordHash)
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if err != nil {
		return Account{}, fmt.Errorf("create account %q: %w", username, translate(err))
	}
	return a, nil
}

// GetAccount returns the account with the given id, or ErrNotFound.
func (s *Store) GetAccount(ctx context.Context, id string) (Account, error) {
	rows, _ := s.db(ctx).Query(ctx, `
		SELECT id, username, password_hash, create_time
		FROM accounts
		WHERE id = $1`,
		id)
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if err != nil {
		return Account{}, fmt.Errorf("get account %q: %w", id, translate(err))
	}
	return a, nil
}

// GetAccountByUsername returns the account with the given username, or
// ErrNotFound.
func (s *Store) GetAccountByUsername(ctx context.Context, username string) (Account, error) {
	rows, _ := s.db(ctx).Query(ctx, `
		SELECT id, username, password_hash, create_time
		FROM accounts
		WHERE username = $1`,
		username)
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if err != nil {
		return Account{}, fmt.Errorf("get account by username %q: %w", username, translate(err))
	}
	return a, nil
}
