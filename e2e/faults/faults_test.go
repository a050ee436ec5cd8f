package faults

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shebasvc/sheba/config"
	"github.com/shebasvc/sheba/e2e/keyedwrites"
)

// The load of every scenario: clients sending keyed creates at once, at
// most writes of them (for at most the scenario's loadFor).
const (
	clients = 4
	writes  = 1000
)

// scenario is a way of breaking the link: breakLink runs while the load
// does, and returns when ctx ends.
type scenario struct {
	name string
	// limitsTimeout is limits.timeout: each call's deadline.
	limitsTimeout time.Duration
	loadFor       time.Duration
	breakLink     func(ctx context.Context, l *link) error
	// want names an outcome the faults must have caused at least once, so
	// that a scenario that broke nothing fails.
	want string
}

// TestConnectionsReset breaks the connections between sheba and Postgres
// while 4 clients send keyed creates over REST, in three ways, each on
// half of the connections or all, for a few hundred milliseconds at a
// time: Toxiproxy's reset_peer toxic, which drops what comes next (now
// toward Postgres, now toward sheba) and resets the connection 0 to 15 ms
// later; its limit_data toxic, which closes a connection after a random
// number of bytes of Postgres's answers, so anywhere in a transaction,
// in the answer to its COMMIT too (made, never acknowledged); or the
// whole proxy disabled (every connection closed, new ones refused), then
// enabled again. Every answer is 200, or 503 DATABASE_UNAVAILABLE with
// RetryInfo, or 504 (never 500, never a driver's text); every write
// answered 200 is in the database; and once the link is whole, retrying
// each other write with its Idempotency-Key leaves exactly one
// subscription per key, with one event each.
func TestConnectionsReset(t *testing.T) {
	for _, sc := range []scenario{
		{
			name: "reset_peer", limitsTimeout: 2 * time.Second, loadFor: 5 * time.Second, want: "503",
			breakLink: toxicCycles(200*time.Millisecond, 300*time.Millisecond, func(i int) toxic {
				return toxic{Name: "reset", Type: "reset_peer", Stream: [2]string{"upstream", "downstream"}[i%2],
					Toxicity: 0.5, Attributes: map[string]any{"timeout": i % 4 * 5}}
			}),
		},
		{
			name: "limit_data", limitsTimeout: 2 * time.Second, loadFor: 5 * time.Second, want: "503",
			breakLink: toxicCycles(300*time.Millisecond, 300*time.Millisecond, func(int) toxic {
				return toxic{Name: "cut", Type: "limit_data", Stream: "downstream",
					Toxicity: 0.5, Attributes: map[string]any{"bytes": 100 + rand.IntN(3000)}}
			}),
		},
		{
			name: "proxy disabled", limitsTimeout: 2 * time.Second, loadFor: 5 * time.Second, want: "503",
			breakLink: func(ctx context.Context, l *link) error {
				for ctx.Err() == nil {
					l.proxy.Stop()
					sleep(ctx, 200*time.Millisecond)
					if err := l.proxy.Start(); err != nil {
						return err
					}
					sleep(ctx, 500*time.Millisecond)
				}
				return nil
			},
		},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t) })
	}
}

// TestStalledLink stalls the link between sheba and Postgres past
// limits.timeout (1 s) while 4 clients send keyed creates over REST:
// Toxiproxy's timeout toxic, with no timeout of its own, drops everything
// sent one way for 1.5 s at a time (now toward Postgres, now toward sheba:
// the statement ran, its answer is lost); or its latency toxic delays
// every answer from Postgres by 150 ± 50 ms for 2 s at a time, so that a
// write's round trips add up to about its deadline, and some outlive it
// in their COMMIT (made, but answered 504). The calls caught answer 504
// at their deadline, or 503 once the health check finds the database
// gone; the rest is as TestConnectionsReset checks.
func TestStalledLink(t *testing.T) {
	for _, sc := range []scenario{
		{
			name: "timeout", limitsTimeout: time.Second, loadFor: 8 * time.Second, want: "504",
			breakLink: toxicCycles(1500*time.Millisecond, time.Second, func(i int) toxic {
				return toxic{Name: "stall", Type: "timeout", Stream: [2]string{"downstream", "upstream"}[i%2],
					Toxicity: 1, Attributes: map[string]any{"timeout": 0}}
			}),
		},
		{
			name: "latency", limitsTimeout: time.Second, loadFor: 8 * time.Second, want: "504",
			breakLink: toxicCycles(2*time.Second, time.Second, func(int) toxic {
				return toxic{Name: "slow", Type: "latency", Stream: "downstream",
					Toxicity: 1, Attributes: map[string]any{"latency": 150, "jitter": 50}}
			}),
		},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t) })
	}
}

// toxicCycles returns a breakLink that adds the toxic next(i) to the link
// for on, then takes it away for off, the i-th time, until ctx ends.
func toxicCycles(on, off time.Duration, next func(i int) toxic) func(context.Context, *link) error {
	return func(ctx context.Context, l *link) error {
		for i := 0; ctx.Err() == nil; i++ {
			if err := l.add(next(i)); err != nil {
				return err
			}
			sleep(ctx, on)
			l.clear()
			sleep(ctx, off)
		}
		return nil
	}
}

// run starts sheba behind a link, sends the load while breakLink breaks
// the link, mends it, retries, and checks what the clients saw and what
// the database holds.
func (sc scenario) run(t *testing.T) {
	s := startSheba(t, func(c *config.Config) { c.Limits.Timeout = sc.limitsTimeout })
	ws := keyedwrites.NewWrites(t, s.pool, writes)
	s.ready(t, 20*time.Second)
	s.client.Subscribe(t, s.receiver.URL)

	ctx, stop := context.WithTimeout(t.Context(), sc.loadFor)
	var wg sync.WaitGroup
	var breakErr error
	wg.Go(func() { breakErr = sc.breakLink(ctx, s.link) })
	start := time.Now()
	first := s.client.Load(ctx, clients, ws)
	stop()
	wg.Wait()
	if breakErr != nil {
		t.Fatalf("breaking the link: %v", breakErr)
	}
	loaded := time.Since(start)

	// Mended: no toxic, the proxy enabled (Start of a started proxy only
	// says so).
	s.link.clear()
	_ = s.link.proxy.Start()
	s.ready(t, 20*time.Second)
	keyedwrites.CheckAnswers(t, first)
	tally := keyedwrites.Tally(first)
	if tally[sc.want] == 0 || tally["200"] == 0 {
		t.Errorf("got %v, want some 200 and some %s: the faults must have broken writes, and not all", tally, sc.want)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	final := s.client.Retry(ctx, first)
	t.Logf("%s in %v; %s", sc.name, loaded.Round(time.Millisecond), keyedwrites.Summary(first, final))
	keyedwrites.CheckDatabase(t, s.pool, final)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
