package cborpb_test

import (
	"bytes"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/codec/cborpb"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// FuzzUnmarshal feeds arbitrary bytes to the decoder as a request body, an
// error and the kitchen sink. It must never panic, and whatever it accepts
// must encode again and decode to the same encoding.
//
//	go test ./server/cborpb -run '^$' -fuzz FuzzUnmarshal -fuzztime 30s
func FuzzUnmarshal(f *testing.F) {
	m := &cborpb.Marshaler{}
	sink := kitchenSink(f)
	for _, msg := range []proto.Message{
		listResponse(3),
		&shebav1.ListSubscriptionsRequest{PageSize: 10, Plan: "pro"},
		&shebav1.CreateAccountRequest{Username: "ada", Password: "correct horse"},
		badRequestStatus(f).Proto(),
	} {
		b, err := m.Marshal(msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	full := sink.New().Interface()
	if err := protojson.Unmarshal([]byte(kitchenJSON), full); err != nil {
		f.Fatal(err)
	}
	if b, err := m.Marshal(full); err == nil {
		f.Add(b)
	}
	f.Add([]byte{0xbf, 0x64, 'p', 'l', 'a', 'n', 0x63, 'p', 'r', 'o', 0xff})
	f.Add([]byte{0xa1, 0x6a, 'c', 'r', 'e', 'a', 't', 'e', 'T', 'i', 'm', 'e', 0xc1, 0xf9, 0x7e, 0x00})

	f.Fuzz(func(t *testing.T, data []byte) {
		for _, target := range []proto.Message{
			&shebav1.ListSubscriptionsResponse{},
			&shebav1.CreateSubscriptionRequest{},
			&spb.Status{},
			sink.New().Interface(),
		} {
			if err := m.Unmarshal(data, target); err != nil {
				continue
			}
			again, err := m.Marshal(target)
			if err != nil {
				t.Fatalf("accepted %x into %T but cannot encode it: %v", data, target, err)
			}
			back := target.ProtoReflect().Type().New().Interface()
			if err := m.Unmarshal(again, back); err != nil {
				t.Fatalf("cannot decode own encoding %x of %x: %v", again, data, err)
			}
			third, err := m.Marshal(back)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, third) {
				t.Fatalf("encoding not stable:\n%x\n%x", again, third)
			}
		}
	})
}
