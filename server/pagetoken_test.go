package server

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store"
)

func TestPageTokens(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	tokens, err := newPageTokens(key)
	if err != nil {
		t.Fatal(err)
	}
	at := store.Cursor{CreateTime: time.Date(2026, 12, 1, 9, 26, 47, 788981000, time.UTC), ID: "91cd2c79-6da0-49b2-9011-057b9b1a2de2"}
	const binding = "list\x00plan=pro"
	good := tokens.Encode(at, binding)

	got, err := tokens.Decode(good, binding)
	if err != nil {
		t.Fatalf("Decode(Encode) = %v", err)
	}
	if diff := cmp.Diff(&at, got); diff != "" {
		t.Errorf("Decode(Encode) (-want +got):\n%s", diff)
	}

	raw, _ := base64.RawURLEncoding.DecodeString(good)
	// signed makes a token of body under key, as a server would: only a
	// holder of the key can make one that passes the check.
	signedFor := func(body []byte, binding string) string {
		return base64.RawURLEncoding.EncodeToString(append(body[:pageTokenBodyLen:pageTokenBodyLen], tokens.tag(body, binding)...))
	}
	signed := func(body []byte) string { return signedFor(body, binding) }
	atTime := func(micros uint64) []byte {
		body := append([]byte(nil), raw[:pageTokenBodyLen]...)
		binary.BigEndian.PutUint64(body[1:9], micros)
		return body
	}
	withTime := func(micros uint64) string { return signed(atTime(micros)) }
	flipped := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	other, _ := newPageTokens([]byte(strings.Repeat("o", 32)))
	random, _ := newPageTokens(nil)
	oldVersion := append([]byte{1}, raw[1:pageTokenBodyLen]...)

	for _, test := range []struct {
		name, token, binding string
	}{
		{"not base64", "!!!!", binding},
		{"padded base64", good + "=", binding},
		{"standard base64", strings.NewReplacer("-", "+", "_", "/").Replace(good) + "+", binding},
		{"too short", good[:len(good)-1], binding},
		{"too long", good + "AA", binding},
		{"empty after decoding", "A", binding},
		{"another version, signed", signed(oldVersion), binding},
		{"time altered", flipped(3), binding},
		{"id altered", flipped(12), binding},
		{"tag altered", flipped(pageTokenLen - 1), binding},
		{"another filter", good, "list\x00plan=basic"},
		{"another listing", good, "other\x00plan=pro"},
		{"another key", other.Encode(at, binding), binding},
		{"a random key", random.Encode(at, binding), binding},
		{"time 2^63 µs, signed", withTime(1 << 63), binding},
		{"time max int64 µs, signed", withTime(math.MaxInt64), binding},
		{"year 10000, signed", withTime(uint64(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())), binding},
	} {
		t.Run(test.name, func(t *testing.T) {
			if c, err := tokens.Decode(test.token, test.binding); err != errBadPageToken {
				t.Errorf("Decode(%q) = %v, %v; want errBadPageToken", test.token, c, err)
			}
		})
	}
	// The far positions above are refused for their time, not their tag.
	if _, err := tokens.Decode(withTime(uint64(at.CreateTime.UnixMicro())), binding); err != nil {
		t.Errorf("a signed token of a real time: %v", err)
	}

	// Through the handler, such a token is a 400 on page_token, before
	// anything is looked up (the server has no store here).
	s := &subscriptionServer{tokens: tokens}
	far := signedFor(atTime(1<<63), listSubscriptionsBinding(""))
	_, err = s.ListSubscriptions(t.Context(), &shebav1.ListSubscriptionsRequest{PageToken: far})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "invalid page_token:") {
		t.Errorf("ListSubscriptions with a signed token of 2^63 µs: got %v, want InvalidArgument on page_token", err)
	}

	if _, err := newPageTokens(key[:31]); err == nil {
		t.Error("newPageTokens accepted a 31-byte key")
	}
}
