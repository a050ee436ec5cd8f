package store_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/shebasvc/sheba/store"
)

func TestCreateAccount(t *testing.T) {
	t.Parallel()
	s := newStore(t)

	got, err := s.CreateAccount(t.Context(), "ada", "hash-1")
	if err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}
	want := store.Account{Username: "ada", PasswordHash: "hash-1"}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(store.Account{}, "ID", "CreateTime")); diff != "" {
		t.Errorf("CreateAccount mismatch (-want +got):\n%s", diff)
	}
	checkUUID(t, "ID", got.ID)
	checkRecent(t, "CreateTime", got.CreateTime)

	other, err := s.CreateAccount(t.Context(), "grace", "hash-2")
	if err != nil {
		t.Fatalf("CreateAccount(second user): %v", err)
	}
	if other.ID == got.ID {
		t.Errorf("two accounts got the same ID %q", got.ID)
	}

	_, err = s.CreateAccount(t.Context(), "ada", "hash-3")
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateAccount(taken username): got %v, want ErrConflict", err)
	}
	// The failed insert changed nothing.
	stored, err := s.GetAccountByUsername(t.Context(), "ada")
	if err != nil {
		t.Fatalf("GetAccountByUsername: %v", err)
	}
	if diff := cmp.Diff(got, stored); diff != "" {
		t.Errorf("account after the conflict mismatch (-want +got):\n%s", diff)
	}
}

func TestGetAccount(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")
	mustCreateAccount(t, s, "grace")

	for _, test := range []struct {
		name    string
		id      string
		want    store.Account
		wantErr error
	}{
		{name: "found", id: ada.ID, want: ada},
		{name: "unknown id", id: uuid.NewString(), wantErr: store.ErrNotFound},
		{name: "malformed id", id: "not-a-uuid", wantErr: store.ErrNotFound},
		{name: "empty id", id: "", wantErr: store.ErrNotFound},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := s.GetAccount(t.Context(), test.id)
			if !errors.Is(err, test.wantErr) {
				t.Fatalf("GetAccount(%q): got error %v, want %v", test.id, err, test.wantErr)
			}
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("GetAccount(%q) mismatch (-want +got):\n%s", test.id, diff)
			}
		})
	}
}

func TestGetAccountByUsername(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ada := mustCreateAccount(t, s, "ada")
	grace := mustCreateAccount(t, s, "grace")

	for _, test := range []struct {
		name     string
		username string
		want     store.Account
		wantErr  error
	}{
		{name: "found", username: "ada", want: ada},
		{name: "found other", username: "grace", want: grace},
		{name: "unknown", username: "linus", wantErr: store.ErrNotFound},
		{name: "case matters", username: "Ada", wantErr: store.ErrNotFound},
		{name: "empty", username: "", wantErr: store.ErrNotFound},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := s.GetAccountByUsername(t.Context(), test.username)
			if !errors.Is(err, test.wantErr) {
				t.Fatalf("GetAccountByUsername(%q): got error %v, want %v", test.username, err, test.wantErr)
			}
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("GetAccountByUsername(%q) mismatch (-want +got):\n%s", test.username, diff)
			}
		})
	}
}
