package webhooks_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/shebasvc/sheba/webhooks"
)

// The secret and message of the Standard Webhooks specification's example,
// and a second secret, the new one of a rotation.
const (
	specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specBody   = `{"test": 2432232314}`
	specTS     = 1614265330
	specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	newSecret  = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	newSig     = "v1,78nXHjpFP0tVJQW5D0SBwmVyyW87BV/rL6MgfM/Bw44="
)

func TestSignMatchesTheSpecification(t *testing.T) {
	for _, test := range []struct {
		name    string
		secrets []string
		want    string
	}{
		{"one secret", []string{specSecret}, specSig},
		// During a rotation's overlap: the new one first, a space apart.
		{"new and old", []string{newSecret, specSecret}, newSig + " " + specSig},
	} {
		got, err := webhooks.Sign(test.secrets, specID, specTS, []byte(specBody))
		if err != nil {
			t.Fatalf("%s: %v", test.name, err)
		}
		if got != test.want {
			t.Errorf("%s: got %s, want %s", test.name, got, test.want)
		}
	}
}

// TestSignVerifiesWithStandardWebhooks verifies signatures with the
// Standard Webhooks library, as receivers do: during a rotation's overlap
// (signed with both secrets) a receiver holding either one verifies, and
// after it (the new one alone) only one holding the new secret does.
func TestSignVerifiesWithStandardWebhooks(t *testing.T) {
	const unrelated = "whsec_dW5yZWxhdGVkIHNlY3JldCBvZiBhIHRoaXJkIG9uZQ=="
	now := time.Now().Unix()
	body := []byte(`{"type":"account.created"}`)
	for _, test := range []struct {
		name     string
		signWith []string
		holds    string
		ok       bool
	}{
		{"one secret", []string{specSecret}, specSecret, true},
		{"overlap, receiver holds the old secret", []string{newSecret, specSecret}, specSecret, true},
		{"overlap, receiver holds the new secret", []string{newSecret, specSecret}, newSecret, true},
		{"overlap, receiver holds another secret", []string{newSecret, specSecret}, unrelated, false},
		{"after the overlap, receiver holds the new secret", []string{newSecret}, newSecret, true},
		{"after the overlap, receiver holds the old secret", []string{newSecret}, specSecret, false},
	} {
		t.Run(test.name, func(t *testing.T) {
			wh, err := standardwebhooks.NewWebhook(test.holds)
			if err != nil {
				t.Fatal(err)
			}
			sig, err := webhooks.Sign(test.signWith, "evt-1", now, body)
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{}
			h.Set("webhook-id", "evt-1")
			h.Set("webhook-timestamp", strconv.FormatInt(now, 10))
			h.Set("webhook-signature", sig)
			if err := wh.Verify(body, h); (err == nil) != test.ok {
				t.Errorf("Verify %s: got %v, want ok %v", sig, err, test.ok)
			}
			// Every signature covers the id.
			h.Set("webhook-id", "evt-2")
			if err := wh.Verify(body, h); err == nil {
				t.Error("Verify with another id: got nil, want an error")
			}
		})
	}
}

func TestSignBadSecret(t *testing.T) {
	for _, secrets := range [][]string{nil, {""}, {"whsec_"}, {"whsec_!!!"}, {specSecret, "whsec_!!!"}} {
		if _, err := webhooks.Sign(secrets, "id", 1, nil); err == nil {
			t.Errorf("Sign with secrets %q: got nil, want an error", secrets)
		}
	}
}
