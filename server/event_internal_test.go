package server

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/webhooks/eventlog"
)

// sampleEvent is an event as the hub hands it on: a Subscription.
func sampleEvent() *eventlog.Event {
	return &eventlog.Event{
		ID: "0b6f3c1e-5b7e-4c43-9a55-0d1f2b3c4d5e", Type: "subscription.created", CreateTime: time.Unix(1700000000, 0),
		Data: []byte(`{"id":"5b1c0e8e-8d6a-4d7e-9a55-1f2e3d4c5b6a","accountId":"0c5a6b7e-2d3f-4a1b-8c9d-0e1f2a3b4c5d",` +
			`"plan":"pro","status":"SUBSCRIPTION_STATUS_ACTIVE","createTime":"2026-12-06T17:00:00Z","etag":"AAAAAQ"}`),
	}
}

// TestEncodedEvent: the codec sends an encoded event's bytes as they are,
// which decode to the event; any other reader of the message (the
// in-process channel's proto.Merge) sees the same message.
func TestEncodedEvent(t *testing.T) {
	e := sampleEvent()
	m := &encodedMessage{b: e.Encoded(EncodingProto, encodeEvent)}
	out, err := Codec(0).Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || !bytes.Equal(out[0].ReadOnlyData(), m.b) || &out[0].ReadOnlyData()[0] != &m.b[0] {
		t.Errorf("Codec.Marshal of an encoded event: got %d buffers, want the event's bytes themselves, not marshaled again", len(out))
	}
	var got shebav1.StreamEventsResponse
	proto.Merge(&got, m)
	ev := got.GetEvent()
	if ev.GetId() != e.ID || ev.GetType() != e.Type || !ev.GetCreateTime().AsTime().Equal(e.CreateTime) ||
		ev.GetData().GetFields()["plan"].GetStringValue() != "pro" {
		t.Errorf("the encoded event: got %v, want %s %s with its data", &got, e.ID, e.Type)
	}
}

// TestEncodedEventREST: the REST encodings of an event are made once, by
// the first stream that writes it, from the decoded message, and every
// other stream's message of that event gets the same bytes; the JSON and
// SSE forms are kept apart.
func TestEncodedEventREST(t *testing.T) {
	e := sampleEvent()
	var made []string
	first := &encodedMessage{b: e.Encoded(EncodingProto, encodeEvent), e: e}
	jsonOf := func(m proto.Message) []byte {
		ev := m.(*shebav1.StreamEventsResponse).GetEvent()
		made = append(made, "json "+ev.GetId())
		return []byte("json of " + ev.GetType())
	}
	sseOf := func(m proto.Message) []byte {
		made = append(made, "sse "+m.(*shebav1.StreamEventsResponse).GetEvent().GetId())
		return []byte("sse")
	}
	j1, s1 := first.SharedJSON(jsonOf), first.SharedSSE(sseOf)
	second := &encodedMessage{b: e.Encoded(EncodingProto, encodeEvent), e: e}
	j2, s2 := second.SharedJSON(jsonOf), second.SharedSSE(sseOf)
	if string(j1) != "json of "+e.Type || string(s1) != "sse" {
		t.Fatalf("got %q and %q, want the encodings f made", j1, s1)
	}
	if &j1[0] != &j2[0] || &s1[0] != &s2[0] {
		t.Error("the second stream's encodings are not the first's bytes")
	}
	if want := []string{"json " + e.ID, "sse " + e.ID}; !slices.Equal(made, want) {
		t.Errorf("made %q, want each encoding once from the event's message: %q", made, want)
	}
}

// BenchmarkSendEvent compares what sending one event costs each stream:
// "encoded", the bytes made once for every stream (what StreamEvents
// does); "message", the response message made once (its Struct from the
// JSON included) and marshaled by each stream; "per-stream", the response
// made and marshaled by each stream.
func BenchmarkSendEvent(b *testing.B) {
	c := Codec(0)
	e := sampleEvent()
	b.Run("encoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Marshal(&encodedMessage{b: e.Encoded(EncodingProto, encodeEvent)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("message", func(b *testing.B) {
		var m shebav1.StreamEventsResponse
		if err := proto.Unmarshal(encodeEvent(e), &m); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Marshal(&m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("per-stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(encodeEvent(e)) == 0 {
				b.Fatal("no bytes")
			}
		}
	})
}
