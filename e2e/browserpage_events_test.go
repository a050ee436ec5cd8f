//go:build browser

package e2e

import (
	"context"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/internal/app"
)

// TestBrowserPageEvents opens the example page watching
// subscription.created, for each protocol the page offers, and publishes
// an account.created then a subscription.created once its stream is open:
// the list shows the second alone, received while the page was open. The
// stream is the test double of EventService (cannedEvents); the page stops
// after one event (max=1), so that Chromium's virtual time, which stands
// still while a fetch is open, moves on and the page is dumped.
func TestBrowserPageEvents(t *testing.T) {
	chromium := chromiumPath(t)
	page := servePage(t)
	events := newCannedEvents()
	e := newTestEnvWith(t, nil, []app.Option{app.WithEventServer(events)},
		func(c *config.Config) { c.HTTP.CORS.AllowedOrigins = []string{page} })

	for _, protocol := range []string{"connect", "connect-proto", "grpc-web"} {
		t.Run(protocol, func(t *testing.T) {
			addr := page + "/?" + url.Values{"server": {e.baseURL}, "key": {testKey}, "protocol": {protocol},
				"watch": {"subscription.created"}, "max": {"1"}}.Encode()
			w := startPageWatch(t, chromium, addr)
			w.opened(t, events)
			events.publish(cannedEvent(t, "evt-a", "account.created"))
			events.publish(cannedEvent(t, "evt-s", "subscription.created"))
			doc := w.page(t)
			state := domByID(doc, "watch-state")
			if state == nil {
				t.Fatalf("no #watch-state:\n%s", w.out)
			}
			if s, _ := domAttr(state, "data-state"); s != "stopped" || domText(state) != "Stopped after 1 event" {
				t.Errorf("watch state %q %q, want stopped after 1 event\n%s", s, domText(state), w.stderr.String())
			}
			if items := listedEvents(doc); len(items) != 1 || !strings.Contains(items[0], "subscription.created evt-s") || !strings.Contains(items[0], `"id":"sub-evt-s"`) {
				t.Errorf("events listed %q, want the one subscription.created evt-s with its data", items)
			}
		})
	}
}

// TestBrowserPageEventsResume: the page's stream ends with UNAVAILABLE
// after each event (as at events.max_duration); watchEvents opens it again
// after the last event's id, and the page lists the event published on the
// second stream after the first one's.
func TestBrowserPageEventsResume(t *testing.T) {
	chromium := chromiumPath(t)
	page := servePage(t)
	events := newCannedEvents()
	events.endAfter = 1
	e := newTestEnvWith(t, nil, []app.Option{app.WithEventServer(events)},
		func(c *config.Config) { c.HTTP.CORS.AllowedOrigins = []string{page} })
	addr := page + "/?" + url.Values{"server": {e.baseURL}, "key": {testKey}, "protocol": {"connect"},
		"watch": {""}, "max": {"2"}}.Encode()
	w := startPageWatch(t, chromium, addr)
	for _, id := range []string{"evt-1", "evt-2"} {
		w.opened(t, events)
		events.publish(cannedEvent(t, id, "subscription.created"))
	}
	items := listedEvents(w.page(t))
	if len(items) != 2 || !strings.Contains(items[0], " evt-1 ") || !strings.Contains(items[1], " evt-2 ") {
		t.Errorf("events listed %q, want evt-1 then evt-2", items)
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	if want := []string{"", "evt-1"}; !slices.Equal(events.afters, want) {
		t.Errorf("the page opened streams after %q, want %q: from now, then after the last event", events.afters, want)
	}
}

// pageWatch is Chromium loading the example page in the background until
// it dumps the page (after its virtual-time budget, which stands still
// while a stream is open: the page stops watching after max events).
type pageWatch struct {
	addr   string
	stderr strings.Builder
	done   chan struct{}
	out    []byte
	err    error
}

// startPageWatch starts Chromium on addr, for at most 2 minutes.
func startPageWatch(t *testing.T, chromium, addr string) *pageWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	w := &pageWatch{addr: addr, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, chromium, chromiumArgs(t, addr)...)
	cmd.Stderr = &w.stderr
	go func() {
		defer close(w.done)
		defer cancel()
		w.out, w.err = cmd.Output()
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

// opened waits for the page's next stream to send its first message.
func (w *pageWatch) opened(t *testing.T, events *cannedEvents) {
	t.Helper()
	select {
	case <-events.opened:
	case <-w.done:
		t.Fatalf("chromium ended before the page's stream opened: %v\n%s\n%s", w.err, w.out, w.stderr.String())
	}
}

// page waits for Chromium's dump of the page and parses it.
func (w *pageWatch) page(t *testing.T) *html.Node {
	t.Helper()
	<-w.done
	if w.err != nil {
		t.Fatalf("chromium %s: %v\n%s", w.addr, w.err, w.stderr.String())
	}
	doc, err := html.Parse(strings.NewReader(string(w.out)))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// listedEvents returns the text of the page's list of events.
func listedEvents(doc *html.Node) []string {
	var items []string
	for li := range domByID(doc, "events").Descendants() {
		if li.Type == html.ElementNode && li.Data == "li" {
			items = append(items, domText(li))
		}
	}
	return items
}
