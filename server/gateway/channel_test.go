package gateway

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// echoAccounts answers GetAccount with the account id it got, and sets
// response metadata.
type echoAccounts struct {
	shebav1.UnimplementedAccountServiceServer
	got *shebav1.GetAccountRequest
}

func (e *echoAccounts) GetAccount(ctx context.Context, req *shebav1.GetAccountRequest) (*shebav1.GetAccountResponse, error) {
	e.got = req
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-seen", md.Get("x-api-key")[0]))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
	if out, _ := metadata.FromOutgoingContext(ctx); len(out) > 0 {
		return nil, status.Error(codes.Internal, "the caller's outgoing metadata leaked into the handler")
	}
	return &shebav1.GetAccountResponse{Account: &shebav1.Account{Id: req.GetAccountId()}}, nil
}

func TestInprocChannel(t *testing.T) {
	intercepted := ""
	c := NewChannel(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		intercepted = info.FullMethod
		if !IsInProcess(ctx) {
			t.Error("handler context is not marked in-process")
		}
		return h(ctx, req)
	})
	impl := &echoAccounts{}
	c.RegisterService(&shebav1.AccountService_ServiceDesc, impl)
	client := shebav1.NewAccountServiceClient(c)

	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k1")
	req := &shebav1.GetAccountRequest{AccountId: "a1"}
	var header, trailer metadata.MD
	resp, err := client.GetAccount(ctx, req, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatalf("GetAccount: %v", err)
	}
	if intercepted != "/sheba.v1.AccountService/GetAccount" {
		t.Errorf("interceptor saw %q", intercepted)
	}
	if resp.GetAccount().GetId() != "a1" {
		t.Errorf("response: got %v", resp)
	}
	if got := header.Get("x-seen"); len(got) != 1 || got[0] != "k1" {
		t.Errorf("header x-seen: got %q, want the incoming x-api-key k1", got)
	}
	if got := trailer.Get("x-trailer"); len(got) != 1 || got[0] != "t" {
		t.Errorf("trailer: got %q", got)
	}
	// Each side has its own copy of the messages.
	if impl.got == req {
		t.Error("the handler got the caller's request message itself")
	}
	req.AccountId = "changed"
	if impl.got.GetAccountId() != "a1" {
		t.Error("changing the caller's request changed the handler's")
	}

	err = c.Invoke(t.Context(), "/sheba.v1.AccountService/Nope", req, &shebav1.GetAccountResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: got %v, want Unimplemented", err)
	}
}
