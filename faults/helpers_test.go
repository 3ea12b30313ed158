// Package faults_test holds the fault tests: a real Artemis broker is
// SIGKILLed and restarted under a running consumer, dead-letter writer and
// publisher, and nothing may be lost. They use the library's exported API
// only. They need a broker of their own, because they kill it: run them
// with scripts/faults, which starts the second local instance "fault"
// (ARTEMIS_INSTANCE=fault, free ports), exports its settings, runs
//
//	BQ_FAULTS=1 go test -race -run Fault -count=1 -timeout 20m -v ./faults/
//
// and stops the instance afterwards. Without BQ_FAULTS=1 every test skips
// with one line (go test ./... runs none), and they refuse to run against
// the default instance. Each one is bounded by its own deadline, runs alone
// (never in parallel: they share the broker they kill) and leaves the
// broker running.
package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

const (
	faultURN = "urn:babel:faults:sequenced"
	// faultScriptTimeout bounds one run of scripts/artemis (a restart
	// replays the journal and starts a JVM on a shared machine).
	faultScriptTimeout = 3 * time.Minute
	// faultWait bounds a wait for something the test caused.
	faultWait = time.Minute
	// faultDrainIdle ends a drain: no message for this long.
	faultDrainIdle = 3 * time.Second
)

// faultBroker is the broker the test may kill: the local instance named by
// ARTEMIS_INSTANCE, never the default one.
type faultBroker struct {
	*brokertest.Broker
	script   string
	instance string
	killed   bool // killed and not restarted yet
}

// envFaults opts in to the fault tests; scripts/faults sets it to 1.
// Without it every fault test skips with one line, so that go test ./...
// never kills a broker, not even the one a shell's ARTEMIS_INSTANCE names.
const envFaults = "BQ_FAULTS"

// requireFaults skips the test unless scripts/faults runs it. Past this
// point a missing broker fails the test: scripts/faults starts every one.
func requireFaults(t *testing.T) {
	t.Helper()
	if os.Getenv(envFaults) != "1" {
		t.Skip("fault test skipped: " + envFaults + " is not set; the fault tests SIGKILL their brokers: " +
			"run them with scripts/faults, which starts brokers of their own and sets " + envFaults + "=1")
	}
}

func requireFaultBroker(t *testing.T) *faultBroker {
	t.Helper()
	requireFaults(t)
	b, ok := brokertest.FromEnv()
	if !ok {
		t.Fatal("fault tests need their own broker: run scripts/faults (ARTEMIS_URL is not set)")
	}
	inst := os.Getenv("ARTEMIS_INSTANCE")
	if inst == "" || inst == "default" {
		t.Fatalf("fault tests SIGKILL their broker: ARTEMIS_INSTANCE must name a second local instance "+
			"(scripts/faults sets ARTEMIS_INSTANCE=fault), not %q", inst)
	}
	script, err := brokertest.ScriptPath()
	require.NoError(t, err)
	fb := &faultBroker{Broker: b, script: script, instance: inst}
	// The broker about to be killed must be the one under test.
	out := fb.run(t, "env")
	require.Equal(t, b.URL, envValue(out, "ARTEMIS_URL"),
		"ARTEMIS_URL is not the URL of instance %q: refusing to kill it", inst)
	t.Cleanup(func() {
		if fb.killed {
			fb.restart(t) // leave the broker running for the next test
		}
	})
	return fb
}

// run runs scripts/artemis for the fault instance and returns its stdout.
func (fb *faultBroker) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := brokertest.RunScript(t, fb.script, []string{"ARTEMIS_INSTANCE=" + fb.instance}, faultScriptTimeout, args...)
	require.NoError(t, err, "scripts/artemis %s", strings.Join(args, " "))
	return out
}

// kill SIGKILLs the broker.
func (fb *faultBroker) kill(t *testing.T) {
	t.Helper()
	fb.killed = true
	fb.run(t, "kill")
}

// restart starts the killed broker again, on the same ports: the clients
// reconnect to the URL they were given.
func (fb *faultBroker) restart(t *testing.T) {
	t.Helper()
	out := fb.run(t, "restart-after-kill")
	fb.killed = false
	require.Equal(t, fb.URL, envValue(out, "ARTEMIS_URL"), "the broker came back on another port")
}

// envValue reads KEY=value (or "export KEY=value") from `scripts/artemis
// env` output (the values it prints for a local instance need no shell
// unquoting).
func envValue(out, key string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimPrefix(line, "export "), key+"="); ok {
			return v
		}
	}
	return ""
}

// faultQueue returns a fresh queue name.
func faultQueue(kind string) string {
	return fmt.Sprintf("bqfault.%s.%08x", kind, rand.Uint32())
}

// faultEvents records a Client's connection events and lets the test wait
// for one.
type faultEvents struct {
	mu      sync.Mutex
	events  []artemis.ConnectionEvent
	changed chan struct{} // closed and replaced on every event
}

func newFaultEvents() *faultEvents { return &faultEvents{changed: make(chan struct{})} }

func (e *faultEvents) on(ev artemis.ConnectionEvent) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// mark is the index of the next event.
func (e *faultEvents) mark() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.events)
}

// wait returns the first event from index from on that is of kind (and
// concerns addr, when addr is not empty), failing the test after timeout.
func (e *faultEvents) wait(t *testing.T, from int, kind artemis.ConnectionEventKind, addr string, timeout time.Duration) artemis.ConnectionEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		e.mu.Lock()
		for _, ev := range e.events[from:] {
			if ev.Kind == kind && (addr == "" || ev.Address == addr) {
				e.mu.Unlock()
				return ev
			}
		}
		changed := e.changed
		e.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no %v event (address %q) within %v; events since: %s", kind, addr, timeout, e.summary(from))
		}
	}
}

// count counts the events of kind from index from on.
func (e *faultEvents) count(from int, kind artemis.ConnectionEventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.events[from:] {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// summary counts the events by kind, in order of first appearance.
func (e *faultEvents) summary(from int) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var order []artemis.ConnectionEventKind
	n := map[artemis.ConnectionEventKind]int{}
	for _, ev := range e.events[from:] {
		if n[ev.Kind] == 0 {
			order = append(order, ev.Kind)
		}
		n[ev.Kind]++
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%v=%d", k, n[k]))
	}
	return strings.Join(parts, " ")
}

// faultDial connects a Client that re-attaches quickly after a loss.
func faultDial(t *testing.T, fb *faultBroker, onEvent func(artemis.ConnectionEvent)) *artemis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{fb.URL}, &artemis.ClientOptions{
		OnEvent:     onEvent,
		DialTimeout: 10 * time.Second,
		Backoff:     &artemis.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// faultData is the payload: a sequence number.
type faultData struct {
	Seq int `json:"seq"`
}

// faultPublish publishes n envelopes with seq 0..n-1 to q from workers
// goroutines and returns meta.id -> seq.
func faultPublish(t *testing.T, ctx context.Context, fb *faultBroker, q string, n, workers int) map[string]int {
	t.Helper()
	c := faultDial(t, fb, nil)
	defer func() { _ = c.Close(context.Background()) }()
	pub, err := c.Publisher(ctx, q)
	require.NoError(t, err)
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int(next.Add(1) - 1); seq < n; seq = int(next.Add(1) - 1) {
				id, err := pub.Publish(ctx, artemis.Job(faultURN, faultData{Seq: seq}))
				if err != nil {
					errs <- fmt.Errorf("publish seq %d: %w", seq, err)
					return
				}
				ids[seq] = id
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	sent := make(map[string]int, n)
	for seq, id := range ids {
		sent[id] = seq
	}
	require.Len(t, sent, n, "every publish returned its own meta.id")
	elapsed := time.Since(start)
	t.Logf("published %d durable messages to %s in %v (%.0f/s)", n, q, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	return sent
}

// faultReports counts what a consumer reports, by kind.
type faultReports struct {
	mu      sync.Mutex
	byKind  map[string]int
	byID    map[artemis.DeliveryKind]map[string]int // kind -> meta.id -> reports
	samples map[string]string
	first   map[artemis.DeliveryKind]chan struct{} // closed on the first report of a kind
}

func newFaultReports(kinds ...artemis.DeliveryKind) *faultReports {
	r := &faultReports{byKind: map[string]int{}, byID: map[artemis.DeliveryKind]map[string]int{}, samples: map[string]string{},
		first: map[artemis.DeliveryKind]chan struct{}{}}
	for _, k := range kinds {
		r.first[k] = make(chan struct{})
		r.byID[k] = map[string]int{}
	}
	return r
}

func (r *faultReports) onError(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
	var de *artemis.DeliveryError
	name := "not a *DeliveryError"
	if errors.As(err, &de) {
		name = de.Kind.Err().Error() + " / " + de.Disposition.String()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byKind[name]++
	if _, ok := r.samples[name]; !ok {
		r.samples[name] = err.Error()
	}
	if de == nil {
		return
	}
	if ids, ok := r.byID[de.Kind]; ok {
		ids[de.MessageID]++
		if ids[de.MessageID] == 1 && len(ids) == 1 {
			close(r.first[de.Kind])
		}
	}
}

func (r *faultReports) ids(kind artemis.DeliveryKind) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.byID[kind]))
	for k, v := range r.byID[kind] {
		out[k] = v
	}
	return out
}

func (r *faultReports) log(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.byKind))
	for k := range r.byKind {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.Logf("  reported %q x%d, e.g. %s", k, r.byKind[k], r.samples[k])
	}
}

// waitClosed waits for ch, failing the test with what after timeout.
func waitClosed(t *testing.T, ch <-chan struct{}, timeout time.Duration, what func() string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what())
	}
}

// faultSent publishes n envelopes to q (faultPublish, from workers
// goroutines), records each as acknowledged in l and returns meta.id ->
// seq.
func faultSent(t *testing.T, ctx context.Context, fb *faultBroker, q string, n, workers int, l *ledger.Ledger) map[string]int {
	t.Helper()
	sent := faultPublish(t, ctx, fb, q, n, workers)
	for id := range sent {
		l.Acked(id)
	}
	return sent
}

// faultPark parks the handlers of a broker-kill scenario: the at-th call
// (counted by the caller) and every later one wait until release, and
// reached closes once all the consumer's handlers are parked, so the kill
// comes with every handler held: none is free to take a prefetched
// delivery on the dead link, and the deliveries in a handler at the kill
// are the handler count.
type faultPark struct {
	at       int64
	handlers int64
	parked   atomic.Int64
	reached  chan struct{}
	done     chan struct{}
	once     sync.Once
}

func newFaultPark(at, handlers int) *faultPark {
	return &faultPark{at: int64(at), handlers: int64(handlers), reached: make(chan struct{}), done: make(chan struct{})}
}

// call is the handler's n-th counted call: from the at-th on it parks until
// release, and the call that parks the last free handler closes reached.
func (p *faultPark) call(n int64) {
	if n < p.at {
		return
	}
	if p.parked.Add(1) == p.handlers {
		close(p.reached)
	}
	<-p.done
}

// release lets the parked handlers go (any number of times; a test defers
// it so that no handler stays parked).
func (p *faultPark) release() { p.once.Do(func() { close(p.done) }) }

// faultKill is when a scenario's kill happened.
type faultKill struct {
	mark      int       // the events' mark before the kill
	inHandler int       // deliveries in a handler at the kill
	began     time.Time // before the SIGKILL
	ended     time.Time // once the broker is dead
}

// kill waits (3 minutes, what says for what) until the handlers are parked,
// SIGKILLs the broker inside l.CutAround(slack, ...), runs atKill (when
// not nil) and releases the handlers.
func (p *faultPark) kill(t *testing.T, fb *faultBroker, l *ledger.Ledger, events *faultEvents, slack int,
	what func() string, atKill func(),
) faultKill {
	t.Helper()
	waitClosed(t, p.reached, 3*time.Minute, func() string {
		return fmt.Sprintf("%s, %d of %d handlers parked", what(), p.parked.Load(), p.handlers)
	})
	k := faultKill{mark: events.mark(), began: time.Now()}
	k.inHandler = l.CutAround(slack, func() { fb.kill(t) })
	k.ended = time.Now()
	if atKill != nil {
		atKill()
	}
	p.release()
	return k
}

// faultConsumeDirect runs cons on q through a Client straight to the
// broker (faultDial) with the given credit, in the background. It returns
// the Client's events, the consumer's stop and when the consume started.
func faultConsumeDirect(t *testing.T, fb *faultBroker, q string, cons *artemis.Consumer) (*faultEvents, func(), time.Time) {
	t.Helper()
	events := newFaultEvents()
	c := faultDial(t, fb, events.on)
	started := time.Now()
	stop := testkit.ConsumeInBackground(t, c, q, cons, faultWait)
	return events, stop, started
}

// The broker-kill scenarios under a consumer run 4 handlers on credit 10:
// the receiver holds at most the credit unsettled when the broker dies,
// and each handler may have one settlement in flight.
const (
	faultKillConcurrency = 4
	faultKillCredit      = 10
)

// faultKillRun is the set-up of a broker-kill scenario under a consumer:
// the fault broker, a fresh queue holding the messages sent, each
// acknowledged in the ledger, and the park for its handlers.
type faultKillRun struct {
	fb   *faultBroker
	q    string
	l    *ledger.Ledger
	sent map[string]int // meta.id -> seq
	park *faultPark
}

// faultKillStart publishes total envelopes to a fresh queue of kind from
// workers goroutines within timeout, after prepare set up the ledger (its
// window, the calls it expects); the park holds every call from the
// killAt-th on, and is reached once all faultKillConcurrency handlers are held.
func faultKillStart(t *testing.T, timeout time.Duration, kind string, total, workers, killAt int,
	prepare func(*ledger.Ledger),
) *faultKillRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r := &faultKillRun{fb: requireFaultBroker(t), q: faultQueue(kind), l: ledger.New(), park: newFaultPark(killAt, faultKillConcurrency)}
	prepare(r.l)
	r.sent = faultSent(t, ctx, r.fb, r.q, total, workers, r.l)
	return r
}
