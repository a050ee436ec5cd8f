package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestSSEStream: eventload's SSE client sends the key and the type filter,
// counts a heartbeat as the first message, and records an event under its
// type and the id in its data (a data split over two lines included).
func TestSSEStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "k1" || r.Header.Get("Accept") != "text/event-stream" ||
			r.URL.Query().Get("eventTypes") != "subscription.created" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("id: c1\nevent: heartbeat\ndata: {\"cursor\":\"c1\"}\n\n" +
			"id: e1\nevent: subscription.created\ndata: {\"id\":\"s1\",\ndata: \"plan\":\"pro\"}\n\n"))
	}))
	defer srv.Close()
	s := &eventStream{typ: "subscription.created"}
	var firsts atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sseStream(ctx, srv.Client(), srv.URL, "k1", s, func() { firsts.Add(1) })
	if firsts.Load() == 0 {
		t.Error("first() never called")
	}
	if len(s.receipts) != 1 || s.receipts[0].key != "subscription.created/s1" {
		t.Errorf("receipts %+v, want one of subscription.created/s1", s.receipts)
	}
}
