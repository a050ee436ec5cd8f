package gateway_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shebasvc/sheba/server/gateway"
)

// TestExtendWriteDeadline streams ten lines, 100 ms apart, from a server
// whose write timeout is 500 ms, over HTTP/1.1 and HTTP/2: with the
// deadline moved before each write every line arrives; without, the
// answer is cut short.
func TestExtendWriteDeadline(t *testing.T) {
	const (
		writeTimeout = 500 * time.Millisecond
		lines        = 10
	)
	stream := func(extend bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			for range lines {
				if extend {
					if err := gateway.ExtendWriteDeadline(w, writeTimeout); err != nil {
						t.Errorf("ExtendWriteDeadline: %v", err)
						return
					}
				}
				if _, err := io.WriteString(w, "line\n"); err != nil {
					return
				}
				if http.NewResponseController(w).Flush() != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		for _, extend := range []bool{true, false} {
			s := httptest.NewUnstartedServer(stream(extend))
			s.Config.WriteTimeout = writeTimeout
			if proto == "HTTP/2.0" {
				s.EnableHTTP2 = true
				s.StartTLS()
			} else {
				s.Start()
			}
			resp, err := s.Client().Get(s.URL)
			got := 0
			if err == nil {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					got++
				}
				resp.Body.Close()
				if resp.Proto != proto {
					t.Errorf("answered over %s, want %s", resp.Proto, proto)
				}
			}
			s.Close()
			switch {
			case extend && got != lines:
				t.Errorf("%s, deadline moved before each write: %d lines of %d (%v)", proto, got, lines, err)
			case !extend && got == lines:
				t.Errorf("%s, deadline not moved: all %d lines arrived, want the answer cut at the write timeout", proto, lines)
			}
		}
	}
}
