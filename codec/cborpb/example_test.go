package cborpb_test

import (
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	"github.com/shebasvc/sheba/codec/cborpb"
)

// The gateway answers CBOR to Accept: application/cbor and reads CBOR
// bodies sent with Content-Type: application/cbor, errors included.
func ExampleMarshaler() {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(cborpb.MediaType, &cborpb.Marshaler{}),
	)
	_ = mux
}
