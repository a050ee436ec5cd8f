// Package resttest is the REST client of sheba's tests: a request with a
// JSON body and headers, the whole answer read, and the checks of status
// codes and google.rpc.Status bodies that the system tests (e2e) and the
// gateway's own tests (server/gateway) make alike.
package resttest

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Client sends requests to BaseURL with HTTP (http.DefaultClient when
// nil), each with Header set first.
type Client struct {
	BaseURL string
	HTTP    *http.Client
	Header  http.Header
}

// Response is an answer as the client got it, its body read whole.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// Do sends a request with body (none if "") of type application/json.
// header holds name, value pairs set on top of c.Header; an empty value
// removes the header.
func (c Client) Do(t testing.TB, method, path, body string, header ...string) Response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, c.BaseURL+path, r)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	return c.Send(t, req)
}

// Send sends req and reads the whole answer.
func (c Client) Send(t testing.TB, req *http.Request) Response {
	t.Helper()
	client := c.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL.Path, err)
	}
	return Response{Code: resp.StatusCode, Header: resp.Header, Body: b}
}

// JSON decodes the body, a JSON object, into a generic map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// Status decodes a google.rpc.Status body in JSON.
func (r Response) Status(t testing.TB) *spb.Status {
	t.Helper()
	var st spb.Status
	if err := protojson.Unmarshal(r.Body, &st); err != nil {
		t.Fatalf("body %q is not a google.rpc.Status: %v", r.Body, err)
	}
	return &st
}

// JSONValue decodes a JSON document of any shape.
func JSONValue(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("body %q is not JSON: %v", b, err)
	}
	return v
}

// WantCode checks the HTTP status code.
func WantCode(t testing.TB, r Response, want int) {
	t.Helper()
	if r.Code != want {
		t.Fatalf("got HTTP %d, want %d; body %s", r.Code, want, r.Body)
	}
}

// WantError checks an error answer: its HTTP code, the code of its
// google.rpc.Status and, if field is not empty, a BadRequest violation of
// that field. It returns the status.
func WantError(t testing.TB, r Response, httpCode int, code codes.Code, field string) *spb.Status {
	t.Helper()
	WantCode(t, r, httpCode)
	st := r.Status(t)
	if got := codes.Code(st.GetCode()); got != code {
		t.Fatalf("got status code %v, want %v; body %s", got, code, r.Body)
	}
	if field != "" && !HasViolation(status.FromProto(st), field) {
		t.Fatalf("no field violation for %q in %s", field, r.Body)
	}
	return st
}

// HasViolation reports whether st carries a BadRequest violation of field.
func HasViolation(st *status.Status, field string) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return true
				}
			}
		}
	}
	return false
}

// ConnectStatus reads the JSON body of a Connect error (a browser
// protocol's, docs/browser.md#errors) as a status, its details kept.
func ConnectStatus(t testing.TB, body []byte) *status.Status {
	t.Helper()
	var ce struct {
		Code    connect.Code `json:"code"`
		Message string       `json:"message"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.Unmarshal(body, &ce); err != nil {
		t.Fatalf("Connect error %q: %v", body, err)
	}
	p := &spb.Status{Code: int32(ce.Code), Message: ce.Message}
	for _, d := range ce.Details {
		v, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("detail %s: %v", d.Type, err)
		}
		p.Details = append(p.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type, Value: v})
	}
	return status.FromProto(p)
}

// GRPCWebStatus reads the status of a gRPC-Web answer from its headers or
// trailers h: Grpc-Status and Grpc-Status-Details-Bin. It returns nil for
// OK.
func GRPCWebStatus(t testing.TB, h http.Header) *status.Status {
	t.Helper()
	code, err := strconv.Atoi(h.Get("Grpc-Status"))
	if err != nil {
		t.Fatalf("no grpc-status in %v", h)
	}
	if code == 0 {
		return nil
	}
	p := &spb.Status{Code: int32(code)}
	if bin := h.Get("Grpc-Status-Details-Bin"); bin != "" {
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(bin, "="))
		if err != nil {
			t.Fatalf("grpc-status-details-bin: %v", err)
		}
		if err := proto.Unmarshal(b, p); err != nil {
			t.Fatalf("grpc-status-details-bin: %v", err)
		}
	}
	return status.FromProto(p)
}

// ErrorInfos lists the domain/reason of every ErrorInfo of st: an answer
// of sheba's carries exactly one.
func ErrorInfos(st *status.Status) []string {
	var infos []string
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			infos = append(infos, ei.GetDomain()+"/"+ei.GetReason())
		}
	}
	return infos
}
