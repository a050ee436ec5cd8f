package server

import (
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/interceptors/reason"
)

// decodeWith decodes m, marshaled, with c into a new request of method, as
// grpc-go hands a codec a message: split in buffers of at most 1 KiB, as
// HTTP/2 frames split it.
func decodeWith(t *testing.T, c interface {
	Unmarshal(mem.BufferSlice, any) error
}, method string, m proto.Message) decodeTarget {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var data mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 1024)
		data = append(data, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	in := &request{msg: newRequestOf(t, method)}
	if err := c.Unmarshal(data, in); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	return in
}

// TestCodec: the codec decodes a request within its bounds as grpc-go's
// does; it refuses one over grpc.max_recv_bytes and one whose event_types
// holds more items than there are event types, unread, with the answers
// the chain gives them (CheckRequest), and it decodes what is no request
// of the services as grpc-go's codec does.
func TestCodec(t *testing.T) {
	const create = shebav1.WebhookService_CreateWebhookEndpoint_FullMethodName
	c := Codec(4096)
	ok := &shebav1.CreateWebhookEndpointRequest{Url: "https://example.com/hook", EventTypes: EventTypes()}
	in := decodeWith(t, c, create, ok)
	if CheckRequest(in.request()) != nil || !proto.Equal(in.message(), ok) {
		t.Fatalf("within the bounds: got %v, refused %v", in.message(), CheckRequest(in.request()))
	}

	tooMany := &shebav1.CreateWebhookEndpointRequest{Url: "https://example.com/hook", EventTypes: append(EventTypes(), "account.created")}
	in = decodeWith(t, c, create, tooMany)
	st := status.Convert(CheckRequest(in.request()))
	if st.Code() != codes.InvalidArgument || reason.Of(st) != reason.InvalidArgument {
		t.Fatalf("one event type too many: got %v, want INVALID_ARGUMENT", st)
	}
	var violations []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				violations = append(violations, v.GetField()+": "+v.GetDescription())
			}
		}
	}
	if want := fmt.Sprintf("event_types: must hold at most %d items", len(EventTypes())); len(violations) != 1 || violations[0] != want {
		t.Errorf("violations %q, want [%q]", violations, want)
	}
	if in.message().(*shebav1.CreateWebhookEndpointRequest).GetUrl() != "" {
		t.Error("the refused message was unmarshalled")
	}

	big := &shebav1.CreateWebhookEndpointRequest{Url: "https://example.com/" + string(make([]byte, 4096))}
	in = decodeWith(t, c, create, big)
	if st := status.Convert(CheckRequest(in.request())); st.Code() != codes.ResourceExhausted || reason.Of(st) != reason.BodyTooLarge {
		t.Errorf("over 4096 bytes: got %v, want RESOURCE_EXHAUSTED BODY_TOO_LARGE", st)
	}
	if in := decodeWith(t, Codec(0), create, big); CheckRequest(in.request()) != nil {
		t.Errorf("no bound: refused %v", CheckRequest(in.request()))
	}

	// Not a request of the services (a health check's): grpc-go's codec.
	var other shebav1.PingResponse
	pong, err := proto.Marshal(&shebav1.PingResponse{Message: "pong"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(pong)}, &other); err != nil || other.GetMessage() != "pong" {
		t.Errorf("another message: %v, %v", &other, err)
	}
}

// TestCheckRequestDecoded: a request decoded already (REST's) over its
// bound is refused as the codec refuses it on the wire.
func TestCheckRequestDecoded(t *testing.T) {
	ok := &shebav1.CreateWebhookEndpointRequest{EventTypes: EventTypes()}
	over := &shebav1.CreateWebhookEndpointRequest{EventTypes: make([]string, len(EventTypes())+1)}
	if err := CheckRequest(ok); err != nil {
		t.Errorf("within the bound: %v", err)
	}
	if st := status.Convert(CheckRequest(over)); st.Code() != codes.InvalidArgument {
		t.Errorf("over the bound: got %v, want INVALID_ARGUMENT", st)
	}
	if err := CheckRequest(&shebav1.PingRequest{}); err != nil {
		t.Errorf("Ping: %v", err)
	}
	ping := &shebav1.PingRequest{}
	if allocs := testing.AllocsPerRun(100, func() { _ = CheckRequest(ping) }); allocs != 0 {
		t.Errorf("CheckRequest of a Ping: %v allocations, want none", allocs)
	}
}

// BenchmarkCheckRequest is the chain's bounds link on a decoded request:
// one without a bounded field (Ping), and one with (its list counted).
func BenchmarkCheckRequest(b *testing.B) {
	for _, req := range []proto.Message{
		&shebav1.PingRequest{},
		&shebav1.CreateWebhookEndpointRequest{Url: "https://example.com/hook", EventTypes: EventTypes()},
	} {
		b.Run(string(req.ProtoReflect().Descriptor().Name()), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := CheckRequest(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// newRequestOf returns a new request message of method, from the method
// table.
func newRequestOf(t *testing.T, method string) proto.Message {
	t.Helper()
	for _, svc := range shebav1.Services {
		for _, m := range svc.Methods {
			if m.FullName == method {
				return m.NewRequest()
			}
		}
	}
	t.Fatalf("%s: no such method in the table", method)
	return nil
}
