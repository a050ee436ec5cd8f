// Package webhookstest gives tests a webhook receiver: an HTTP server on
// 127.0.0.1 that answers as the test says and records every request. The
// delivery tests of package webhooks and the system tests of package e2e
// both use it, so there is one receiver to read and to fix.
package webhookstest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Request is one request a Receiver got.
type Request struct {
	Header http.Header
	Body   []byte
	// At is when the request arrived.
	At time.Time
}

// Event is the body of a delivery (docs/webhooks.md#the-request).
type Event struct {
	Type      string         `json:"type"`
	Timestamp time.Time      `json:"timestamp"`
	Data      map[string]any `json:"data"`
}

// Verify checks the request's signature with the endpoint's secret, the
// way a receiver using a Standard Webhooks library does (an independent
// implementation, not sheba's Sign), and returns its body decoded.
func (r Request) Verify(secret string) (Event, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return Event{}, fmt.Errorf("secret %q: %w", secret, err)
	}
	if err := wh.Verify(r.Body, r.Header); err != nil {
		return Event{}, fmt.Errorf("signature of %s: %w", r.Body, err)
	}
	var ev Event
	if err := json.Unmarshal(r.Body, &ev); err != nil {
		return Event{}, fmt.Errorf("body %s: %w", r.Body, err)
	}
	return ev, nil
}

// Receiver is a webhook endpoint on 127.0.0.1 whose answers the test
// chooses. It records every request and the most it had in flight at once.
// It is safe for concurrent use.
type Receiver struct {
	*httptest.Server
	answer func(n int, w http.ResponseWriter) int

	mu       sync.Mutex
	got      []Request
	inflight int
	peak     int
}

// NewReceiver starts a receiver that answers its n-th request (from 1) with
// the status answer returns. answer runs on the request's goroutine: it may
// set headers on w, or sleep to be slow. The receiver is closed when the
// test ends, so stop whatever sends to it first (register that cleanup
// later).
func NewReceiver(tb testing.TB, answer func(n int, w http.ResponseWriter) int) *Receiver {
	tb.Helper()
	r := &Receiver{answer: answer}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(r.Close)
	return r
}

// Status is the answer of a receiver that always answers code.
func Status(code int) func(int, http.ResponseWriter) int {
	return func(int, http.ResponseWriter) int { return code }
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got = append(r.got, Request{Header: req.Header.Clone(), Body: body, At: time.Now()})
	n := len(r.got)
	r.inflight++
	r.peak = max(r.peak, r.inflight)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inflight--
		r.mu.Unlock()
	}()
	w.WriteHeader(r.answer(n, w))
}

// Requests returns the requests so far, in the order they arrived.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.got...)
}

// IDs counts the requests so far by their webhook-id (the event's id).
func (r *Receiver) IDs() map[string]int {
	ids := map[string]int{}
	for _, req := range r.Requests() {
		ids[req.Header.Get("webhook-id")]++
	}
	return ids
}

// Peak returns the most requests the receiver had in flight at once.
func (r *Receiver) Peak() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}
