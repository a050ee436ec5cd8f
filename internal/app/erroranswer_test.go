package app

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shebasvc/sheba/config"
	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
	"github.com/shebasvc/sheba/store/storetest"
)

// TestErrorAnswerBytes pins, byte for byte, the answer to make bench's
// error-rest request (a keyed CreateAccount whose username breaks its rule)
// on REST, JSON and CBOR, and on gRPC: status, headers, body, and the gRPC
// status with its details and metadata. The error path is cut for speed
// (cached statuses and bodies); a client must see none of it, on the first
// answer or on the ones after.
func TestErrorAnswerBytes(t *testing.T) {
	const key = "pin-key-0123456789abcdefghijklmnop"
	cfg := config.Default()
	cfg.Database.URL = storetest.NewDatabase(t)
	cfg.Auth.Keys = []config.APIKey{keyEntry("pin", key)}
	// A per-key limit, for its RateLimit headers.
	cfg.Limits.PerKeyRate, cfg.Limits.PerKeyBurst = 1000, 1000
	a := benchApp(t, cfg)
	const body = `{"username":"NOT VALID!","password":"bench-password"}`
	const wantJSON = `{"code":3,"message":"invalid username: does not match regex pattern ` + "`^[a-z0-9._-]{3,64}$`" + `","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INVALID_ARGUMENT","domain":"sheba","metadata":{}},{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"username","description":"does not match regex pattern ` + "`^[a-z0-9._-]{3,64}$`" + `","reason":""}]}]}`
	wantHeader := func(contentType string) string {
		return "Content-Type: " + contentType + "\nRatelimit-Policy: \"key\";q=1000;w=1\nRatelimit: \"key\";r=N;t=1\nVary: Accept\nVary: Accept-Encoding\nX-Request-Id: pin-request\n"
	}
	for _, test := range []struct {
		name, accept, contentType, body string
	}{
		{"json", "", "application/json", wantJSON},
		{"cbor", "application/cbor", "application/cbor", ""},
	} {
		// The first answer fills what is cached, the next ones read it.
		for round := range 3 {
			req := httptest.NewRequest(http.MethodPost, "/v1/accounts", strings.NewReader(body))
			req.Header.Set("X-Api-Key", key)
			req.Header.Set("X-Request-Id", "pin-request")
			req.Header.Set("Content-Type", "application/json")
			if test.accept != "" {
				req.Header.Set("Accept", test.accept)
			}
			rec := httptest.NewRecorder()
			a.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest {
				t.Errorf("%s, round %d: got status %d, want 400", test.name, round, rec.Code)
			}
			if diff := cmp.Diff(wantHeader(test.contentType), headerText(rec.Header())); diff != "" {
				t.Errorf("%s, round %d: headers (-want +got):\n%s", test.name, round, diff)
			}
			got, want := rec.Body.String(), ""
			if test.contentType == "application/cbor" {
				got, want = hex.EncodeToString(rec.Body.Bytes()), wantCBOR
			} else {
				want = protoJSONOf(t, test.body)
			}
			if got != want {
				t.Errorf("%s, round %d: body\ngot  %s\nwant %s", test.name, round, got, want)
			}
		}
	}

	lis := listen(t)
	go func() { _ = a.grpc.Serve(lis) }()
	t.Cleanup(a.grpc.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), withKey(key))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := shebav1.NewAccountServiceClient(conn)
	for round := range 3 {
		var header, trailer metadata.MD
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-request-id", "pin-request")
		_, err := client.CreateAccount(ctx, &shebav1.CreateAccountRequest{Username: "NOT VALID!", Password: "bench-password"},
			grpc.Header(&header), grpc.Trailer(&trailer))
		st, _ := status.FromError(err)
		wire, merr := proto.MarshalOptions{Deterministic: true}.Marshal(st.Proto())
		if merr != nil {
			t.Fatal(merr)
		}
		if got := hex.EncodeToString(wire); got != wantGRPCStatus {
			t.Errorf("gRPC, round %d: status\ngot  %s\nwant %s", round, got, wantGRPCStatus)
		}
		// The details as the client received them, unparsed.
		if got := hex.EncodeToString([]byte(strings.Join(trailer["grpc-status-details-bin"], ""))); got != wantGRPCStatus {
			t.Errorf("gRPC, round %d: grpc-status-details-bin\ngot  %s\nwant %s", round, got, wantGRPCStatus)
		}
		delete(trailer, "grpc-status-details-bin")
		got := headerText(http.Header(header)) + "trailer:\n" + headerText(http.Header(trailer))
		const want = "content-type: application/grpc\nratelimit-policy: \"key\";q=1000;w=1\nratelimit: \"key\";r=N;t=1\nx-request-id: pin-request\ntrailer:\n"
		if got != want {
			t.Errorf("gRPC, round %d: metadata\ngot  %s\nwant %s", round, got, want)
		}
	}
}

// The CBOR body and the gRPC status (deterministic wire form) of
// TestErrorAnswerBytes's answer, in hex.
const (
	wantCBOR       = "a364636f6465036764657461696c7382a46540747970657828747970652e676f6f676c65617069732e636f6d2f676f6f676c652e7270632e4572726f72496e666f66646f6d61696e65736865626166726561736f6e70494e56414c49445f415247554d454e54686d65746164617461a0a26540747970657829747970652e676f6f676c65617069732e636f6d2f676f6f676c652e7270632e426164526571756573746f6669656c6456696f6c6174696f6e7381a3656669656c6468757365726e616d6566726561736f6e606b6465736372697074696f6e7832646f6573206e6f74206d61746368207265676578207061747465726e20605e5b612d7a302d392e5f2d5d7b332c36347d2460676d6573736167657844696e76616c696420757365726e616d653a20646f6573206e6f74206d61746368207265676578207061747465726e20605e5b612d7a302d392e5f2d5d7b332c36347d2460"
	wantGRPCStatus = "08031244696e76616c696420757365726e616d653a20646f6573206e6f74206d61746368207265676578207061747465726e20605e5b612d7a302d392e5f2d5d7b332c36347d24601a450a28747970652e676f6f676c65617069732e636f6d2f676f6f676c652e7270632e4572726f72496e666f12190a10494e56414c49445f415247554d454e54120573686562611a6d0a29747970652e676f6f676c65617069732e636f6d2f676f6f676c652e7270632e4261645265717565737412400a3e0a08757365726e616d651232646f6573206e6f74206d61746368207265676578207061747465726e20605e5b612d7a302d392e5f2d5d7b332c36347d2460"
)

var remaining = regexp.MustCompile(`r=[0-9]+`)

// protoJSONOf returns the JSON of a status, js, as the gateway's protojson
// writes it in this binary: protojson puts spaces after some of its commas
// and colons, or not, as a hash of the binary decides (internal/detrand),
// to keep clients from depending on its bytes; the fields, their order and
// the values are in js.
func protoJSONOf(t *testing.T, js string) string {
	t.Helper()
	var st spb.Status
	if err := protojson.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	b, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil || compact.String() != js {
		t.Fatalf("protojson makes %s of %s (%v)", compact.String(), js, err)
	}
	return string(b)
}

// headerText is h, one "Name: value" line per value, sorted, with the
// remaining tokens of a RateLimit header, which fall by one a call, as N.
func headerText(h http.Header) string {
	var lines []string
	for name, vs := range h {
		for _, v := range vs {
			v = remaining.ReplaceAllString(v, "r=N")
			lines = append(lines, name+": "+v+"\n")
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "")
}
