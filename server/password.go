package server

import (
	"crypto/rand"
	"fmt"

	"github.com/alexedwards/argon2id"
)

// defaultHashParams returns the argon2id parameters of new password hashes:
// the OWASP recommendation of 19 MiB, 2 passes, 1 lane. Stored hashes carry
// their own parameters, so changing these affects only new hashes.
func defaultHashParams() argon2id.Params {
	return argon2id.Params{
		Memory:      19 * 1024,
		Iterations:  2,
		Parallelism: 1,
		SaltLength:  16,
		KeyLength:   32,
	}
}

// passwordHasher hashes and verifies passwords with argon2id. It is safe for
// concurrent use.
type passwordHasher struct {
	params *argon2id.Params
	// dummy is a hash of a random password, verified for unknown usernames so
	// that a login for one takes as long as a wrong password.
	dummy string
}

func newPasswordHasher(params argon2id.Params) (*passwordHasher, error) {
	h := &passwordHasher{params: &params}
	dummy, err := h.hash(rand.Text())
	if err != nil {
		return nil, err
	}
	h.dummy = dummy
	return h, nil
}

func (h *passwordHasher) hash(password string) (string, error) {
	hash, err := argon2id.CreateHash(password, h.params)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return hash, nil
}

// verify reports whether password matches hash; the comparison is constant
// time.
func (h *passwordHasher) verify(password, hash string) (bool, error) {
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	if err != nil {
		return false, fmt.Errorf("verify password: %w", err)
	}
	return ok, nil
}

// burn spends the time of one verification and always fails.
func (h *passwordHasher) burn(password string) {
	_, _ = argon2id.ComparePasswordAndHash(password, h.dummy)
}
