package main

// eventload is the client side of the event rows (events.go), run as
// `sheba-bench eventload ...` in its own process pinned to the load CPU:
// it opens the streams (gRPC StreamEvents over a few connections, or SSE
// clients of GET /v1/events:stream), each filtered to one of the four
// event types and keyed with one of the API keys, prints "open" once every
// stream has its first message (at once with -streams 0: the writes
// alone), waits for a line on stdin, then writes
// events through sheba's API at a steady rate for -d, waits for the
// deliveries, prints "done" and then one JSON line (eventResult).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	shebav1 "github.com/shebasvc/sheba/gen/sheba/v1"
)

// eventTypes are §8's types; stream i is filtered to eventTypes[i%4].
var eventTypes = []string{"account.created", "subscription.created", "subscription.updated", "subscription.canceled"}

// eventResult is what eventload prints last.
type eventResult struct {
	Streams int `json:"streams"`
	// Written counts the writes answered OK, per event type.
	Written map[string]int `json:"written"`
	// WriteErrors counts the writes not answered OK.
	WriteErrors int `json:"write_errors"`
	// Expected is the deliveries the written events owe the streams,
	// Delivered those received (an event counted once per stream),
	// Unmatched the received events no answered write explains.
	Expected  int `json:"expected"`
	Delivered int `json:"delivered"`
	Unmatched int `json:"unmatched"`
	// StreamErrors counts the streams that ended before the run did.
	StreamErrors int    `json:"stream_errors"`
	FirstError   string `json:"first_error,omitempty"`
	// Latency of a delivery (ms) from its write's request (an upper
	// bound of commit to receipt), from its write's answer (a lower
	// bound: negative when the event came first), and on gRPC from the
	// event's create_time (taken in the write's transaction before its
	// commit: an upper bound, closer).
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	AnswerP50Ms float64 `json:"answer_p50_ms"`
	AnswerP99Ms float64 `json:"answer_p99_ms"`
	CommitP50Ms float64 `json:"commit_p50_ms,omitempty"`
	CommitP99Ms float64 `json:"commit_p99_ms,omitempty"`
	WriteP50Ms  float64 `json:"write_p50_ms"`
	WriteP99Ms  float64 `json:"write_p99_ms"`
	MeasuredSec float64 `json:"measured_sec"`
	// WriteRate is the writes answered OK per second of writing.
	WriteRate float64 `json:"write_rate"`
}

// receipt is one event received by one stream.
type receipt struct {
	key string // type + "/" + the resource id in its data
	at  time.Time
	// commit is the event's create_time (in gRPC's message; for SSE,
	// read from the log afterwards).
	commit time.Time
}

// eventStream is one open stream: its receipts, and the error that ended
// it early.
type eventStream struct {
	typ      string
	mu       sync.Mutex
	receipts []receipt
	err      error
}

func (s *eventStream) add(r receipt) {
	s.mu.Lock()
	s.receipts = append(s.receipts, r)
	s.mu.Unlock()
}

func (s *eventStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func eventload(args []string) error {
	fs := flag.NewFlagSet("eventload", flag.ContinueOnError)
	transport := fs.String("transport", "grpc", "grpc or sse")
	grpcAddr := fs.String("grpc", "", "sheba's gRPC address (streams over gRPC, and every write)")
	httpURL := fs.String("http", "", "sheba's base URL (SSE streams)")
	streams := fs.Int("streams", 1000, "open streams (0: the writes alone)")
	conns := fs.Int("conns", 8, "gRPC connections the streams share")
	keysFile := fs.String("keys", "", "file of the streams' API keys, one a line")
	writerKey := fs.String("writer-key", "", "API key of the writes")
	rate := fs.Int("rate", 200, "events written per second, over the four types")
	accountRate := fs.Int("account-rate", 5, "of -rate, account.created events per second (CreateAccount hashes a password with argon2id: tens of ms of server CPU each)")
	accounts := fs.Int("accounts", 1000, "seeded accounts the subscription writes cycle through (1..N)")
	dur := fs.Duration("d", 5*time.Second, "how long to write")
	dbURL := fs.String("db", "", "sheba's database: the events' create_time for the streams whose messages carry none (SSE)")
	drain := fs.Duration("drain", 3*time.Second, "how long after the last write to wait for deliveries")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *streams < 0 || *conns < 1 || *rate < 4 || *accountRate < 0 || *accountRate > *rate || *accounts < 1 || *dur <= 0 {
		return errors.New("eventload: need -streams >= 0, -conns and -accounts >= 1, -rate >= 4, -d > 0")
	}
	raw, err := os.ReadFile(*keysFile)
	if err != nil {
		return err
	}
	keys := strings.Fields(string(raw))
	if len(keys) == 0 {
		return errors.New("eventload: no keys")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdin := bufio.NewReader(os.Stdin)
	waitGo := func() error {
		if _, err := stdin.ReadString('\n'); err != nil {
			return fmt.Errorf("eventload: waiting for go: %w", err)
		}
		return nil
	}

	cc, err := grpc.NewClient(*grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	w := &eventWriter{
		accounts: shebav1.NewAccountServiceClient(cc),
		subs:     shebav1.NewSubscriptionServiceClient(cc),
		ctx:      metadata.AppendToOutgoingContext(ctx, "x-api-key", *writerKey),
	}
	w.reset()
	// Open every stream and wait for its first message (a heartbeat).
	ss := make([]*eventStream, *streams)
	var opened sync.WaitGroup
	var wg sync.WaitGroup
	var open func(i int, s *eventStream, first func())
	switch *transport {
	case "grpc":
		ccs := make([]*grpc.ClientConn, *conns)
		for i := range ccs {
			if ccs[i], err = grpc.NewClient(*grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				return err
			}
			defer ccs[i].Close()
		}
		open = func(i int, s *eventStream, first func()) {
			grpcStream(ctx, ccs[i%len(ccs)], keys[i%len(keys)], s, first)
		}
	case "sse":
		// One connection per client, as browsers and most SSE clients
		// hold one; HTTP/1.1 carries one stream per connection.
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *streams, DisableCompression: true}}
		open = func(i int, s *eventStream, first func()) {
			sseStream(ctx, client, *httpURL, keys[i%len(keys)], s, first)
		}
	default:
		return fmt.Errorf("eventload: -transport %q: want grpc or sse", *transport)
	}
	for i := range ss {
		ss[i] = &eventStream{typ: eventTypes[i%len(eventTypes)]}
		opened.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			open(i, ss[i], func() { once.Do(opened.Done) })
			once.Do(opened.Done) // ended before its first message
		}()
	}
	opened.Wait()
	for _, s := range ss {
		if s.err != nil {
			return fmt.Errorf("open a stream: %w", s.err)
		}
	}
	fmt.Println("open")
	// The driver reads the server's memory and CPU, then says go.
	if err := waitGo(); err != nil {
		return err
	}

	start := time.Now()
	w.run(*rate, *accountRate, *accounts, *dur)
	measured := time.Since(start)
	// Wait for the deliveries owed, at most -drain.
	expected := 0
	for i := range ss {
		expected += w.written[ss[i].typ]
	}
	for deadline := time.Now().Add(*drain); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := 0
		for _, s := range ss {
			s.mu.Lock()
			n += len(s.receipts)
			s.mu.Unlock()
		}
		if n >= expected {
			break
		}
	}
	fmt.Println("done")
	// The errors that ended streams before now: cancel ends the rest.
	ended := make([]error, len(ss))
	for i, s := range ss {
		s.mu.Lock()
		ended[i] = s.err
		s.mu.Unlock()
	}
	cancel()
	wg.Wait()

	r := eventResult{Streams: *streams, Written: w.written, WriteErrors: w.errors, Expected: expected,
		MeasuredSec: measured.Seconds()}
	var created map[string]time.Time
	if *dbURL != "" {
		if created, err = eventTimes(*dbURL, start); err != nil {
			return err
		}
	}
	var lats, fromAnswer, commits []time.Duration
	for i, s := range ss {
		if err := ended[i]; err != nil {
			r.StreamErrors++
			if r.FirstError == "" {
				r.FirstError = err.Error()
			}
		}
		for _, rc := range s.receipts {
			sent, ok := w.sent[rc.key]
			if !ok {
				r.Unmatched++
				continue
			}
			r.Delivered++
			lats = append(lats, rc.at.Sub(sent.start))
			fromAnswer = append(fromAnswer, rc.at.Sub(sent.answered))
			if rc.commit.IsZero() {
				rc.commit = created[rc.key]
			}
			if !rc.commit.IsZero() {
				commits = append(commits, rc.at.Sub(rc.commit))
			}
		}
	}
	if len(lats) > 0 {
		r.P50Ms, r.P99Ms, r.MaxMs = percentileMs(lats, 50), percentileMs(lats, 99), percentileMs(lats, 100)
		r.AnswerP50Ms, r.AnswerP99Ms = percentileMs(fromAnswer, 50), percentileMs(fromAnswer, 99)
	}
	if len(commits) > 0 {
		r.CommitP50Ms, r.CommitP99Ms = percentileMs(commits, 50), percentileMs(commits, 99)
	}
	r.WriteP50Ms, r.WriteP99Ms = percentileMs(w.latencies, 50), percentileMs(w.latencies, 99)
	r.WriteRate = float64(w.total()) / measured.Seconds()
	return json.NewEncoder(os.Stdout).Encode(r)
}

// eventTimes reads the create_time of the events logged since start, by
// type + "/" + the id in their data.
func eventTimes(url string, start time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := withConn(context.Background(), url, func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `
			SELECT type || '/' || (convert_from(body, 'UTF8')::jsonb #>> '{data,id}'), create_time
			FROM webhook_events WHERE create_time >= $1`, start.Add(-time.Second))
		if err != nil {
			return err
		}
		var key string
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&key, &at}, func() error {
			out[key] = at
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("eventload: the events' create_time: %w", err)
	}
	return out, nil
}

// grpcStream reads one StreamEvents stream until ctx ends.
func grpcStream(ctx context.Context, cc *grpc.ClientConn, key string, s *eventStream, first func()) {
	st, err := shebav1.NewEventServiceClient(cc).StreamEvents(metadata.AppendToOutgoingContext(ctx, "x-api-key", key),
		&shebav1.StreamEventsRequest{EventTypes: []string{s.typ}})
	if err != nil {
		s.fail(err)
		return
	}
	for {
		m, err := st.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		first()
		ev := m.GetEvent()
		if ev == nil {
			continue
		}
		s.add(receipt{key: ev.GetType() + "/" + ev.GetData().GetFields()["id"].GetStringValue(), at: time.Now(),
			commit: ev.GetCreateTime().AsTime()})
	}
}

// sseStream reads one Server-Sent Events stream until ctx ends. It
// hand-parses the three fields sheba sends (id, event, data): the format
// is a few lines per event, and the Go SSE client libraries add
// reconnection and buffering this measurement must not have.
func sseStream(ctx context.Context, client *http.Client, baseURL, key string, s *eventStream, first func()) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/v1/events:stream?eventTypes="+s.typ, nil)
	if err != nil {
		s.fail(err)
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Api-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		s.fail(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.fail(fmt.Errorf("GET /v1/events:stream: HTTP %d %s", resp.StatusCode, b))
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4096), 1<<20)
	var typ, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			// The end of a message.
			if typ != "" {
				first()
			}
			if typ != "" && typ != "heartbeat" {
				var res struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal([]byte(data), &res)
				s.add(receipt{key: typ + "/" + res.ID, at: time.Now()})
			}
			typ, data = "", ""
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			// Lines of data are joined with newlines (the SSE format).
			if data != "" {
				data += "\n"
			}
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
	if err := sc.Err(); err != nil {
		s.fail(err)
		return
	}
	s.fail(io.ErrUnexpectedEOF)
}

// eventWriter makes the events through sheba's API: each seeded account
// in turn has its subscription's plan changed (subscription.updated),
// canceled (subscription.canceled) and a new one created
// (subscription.created); account.created comes from CreateAccount.
type eventWriter struct {
	accounts shebav1.AccountServiceClient
	subs     shebav1.SubscriptionServiceClient
	ctx      context.Context

	mu        sync.Mutex
	sent      map[string]sentWrite // by type + "/" + resource id
	written   map[string]int
	errors    int
	latencies []time.Duration
}

// sentWrite is when a write was sent and answered.
type sentWrite struct{ start, answered time.Time }

// reset forgets the writes made so far.
func (w *eventWriter) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent, w.written, w.errors, w.latencies = map[string]sentWrite{}, map[string]int{}, 0, nil
}

// total is the writes answered OK.
func (w *eventWriter) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, k := range w.written {
		n += k
	}
	return n
}

// writeWorkers is how many writes may be in flight: enough that a slow
// answer (an argon2id hash) does not hold the pace back.
const writeWorkers = 32

// run writes rate events a second for d, accountRate of them
// account.created and the rest the three subscription types in turn, each
// seeded account's operations in order (update, cancel, create), and
// returns when every write is answered.
func (w *eventWriter) run(rate, accountRate, accounts int, d time.Duration) {
	var next atomic.Int64 // the accounts' operations, in order
	var users atomic.Int64
	runID := time.Now().UnixNano()
	work := make(chan string, rate)
	var wg sync.WaitGroup
	// Each worker owns the accounts n with n % writeWorkers == its index,
	// so one account's operations never run at once.
	queues := make([]chan int64, writeWorkers)
	for i := range queues {
		queues[i] = make(chan int64, rate)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for op := range queues[i] {
				w.subscriptionOp(op, accounts)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range work {
			w.createAccount(fmt.Sprintf("ev-%d-%d", runID, users.Add(1)))
		}
	}()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	n := 0
	// The last account's three operations all run, so that every account
	// has an active "pro" subscription again for the next run.
	for end := time.Now().Add(d); time.Now().Before(end) || next.Load()%3 != 0; n++ {
		<-tick.C
		if accountRate > 0 && n%(rate/accountRate) == 0 && time.Now().Before(end) {
			select {
			case work <- "":
			default: // the hashes fall behind: skipped, as Written shows
			}
			continue
		}
		op := next.Add(1) - 1
		account := op / 3 % int64(accounts)
		queues[account%writeWorkers] <- op
	}
	close(work)
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
}

// subscriptionOp runs operation op: account op/3's update, cancel or
// create.
func (w *eventWriter) subscriptionOp(op int64, accounts int) {
	id := accountID(int(op/3%int64(accounts)) + 1)
	start := time.Now()
	var sub *shebav1.Subscription
	var typ string
	var err error
	switch op % 3 {
	case 0:
		typ = "subscription.updated"
		var r *shebav1.UpdateSubscriptionResponse
		r, err = w.subs.UpdateSubscription(w.ctx, &shebav1.UpdateSubscriptionRequest{AccountId: id,
			Subscription: &shebav1.Subscription{Plan: "team"}})
		sub = r.GetSubscription()
	case 1:
		typ = "subscription.canceled"
		var r *shebav1.CancelSubscriptionResponse
		r, err = w.subs.CancelSubscription(w.ctx, &shebav1.CancelSubscriptionRequest{AccountId: id})
		sub = r.GetSubscription()
	case 2:
		typ = "subscription.created"
		var r *shebav1.CreateSubscriptionResponse
		r, err = w.subs.CreateSubscription(w.ctx, &shebav1.CreateSubscriptionRequest{AccountId: id, Plan: "pro"})
		sub = r.GetSubscription()
	}
	w.record(typ, sub.GetId(), start, err)
}

func (w *eventWriter) createAccount(username string) {
	start := time.Now()
	r, err := w.accounts.CreateAccount(w.ctx, &shebav1.CreateAccountRequest{Username: username, Password: benchPassword})
	w.record("account.created", r.GetAccount().GetId(), start, err)
}

func (w *eventWriter) record(typ, id string, start time.Time, err error) {
	took := time.Since(start)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil || id == "" {
		w.errors++
		return
	}
	w.sent[typ+"/"+id] = sentWrite{start: start, answered: start.Add(took)}
	w.written[typ]++
	w.latencies = append(w.latencies, took)
}
