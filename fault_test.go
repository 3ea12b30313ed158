//go:build faults

package artemis_test

// Fault tests: a real Artemis broker is SIGKILLed and restarted under a
// running consumer, dead-letter writer and publisher, and nothing may be
// lost. They need a broker of their own, because they kill it: run them
// with scripts/faults, which starts the second local instance "fault"
// (ARTEMIS_INSTANCE=fault, free ports), exports its settings, runs
//
//	go test -race -tags faults -run Fault -count=1 -timeout 20m -v .
//
// and stops the instance afterwards. The tests refuse to run against the
// default instance. Each one is bounded by its own deadline, runs alone
// (never in parallel: they share the broker they kill) and leaves the
// broker running.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
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

func requireFaultBroker(t *testing.T) *faultBroker {
	t.Helper()
	b, ok := brokertest.FromEnv()
	if !ok {
		t.Fatal("fault tests need their own broker: run scripts/faults (ARTEMIS_URL is not set)")
	}
	inst := os.Getenv("ARTEMIS_INSTANCE")
	if inst == "" || inst == "default" {
		t.Fatalf("fault tests SIGKILL their broker: ARTEMIS_INSTANCE must name a second local instance "+
			"(scripts/faults sets ARTEMIS_INSTANCE=fault), not %q", inst)
	}
	script := os.Getenv("ARTEMIS_SCRIPT")
	if script == "" {
		script = "scripts/artemis"
	}
	script, err := filepath.Abs(script)
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
	ctx, cancel := context.WithTimeout(context.Background(), faultScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, fb.script, args...)
	cmd.Env = append(os.Environ(), "ARTEMIS_INSTANCE="+fb.instance)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if msg := strings.TrimSpace(stderr.String()); msg != "" || err != nil {
		t.Logf("scripts/artemis %s (%v): %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), msg)
	}
	require.NoError(t, err, "scripts/artemis %s", strings.Join(args, " "))
	return stdout.String()
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

// envValue reads "export KEY=value" from `scripts/artemis env` output (the
// values it prints for a local instance need no shell unquoting).
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
	t.Cleanup(func() { _ = c.Close() })
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
	defer func() { _ = c.Close() }()
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
				id, err := pub.Publish(ctx, faultURN, faultData{Seq: seq})
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

// faultDrained is what a drain found on a queue.
type faultDrained struct {
	copies map[string]int // meta.id -> copies
	total  int
	envs   []*artemis.Envelope
}

// faultDrain takes every message off addr (pre-settled: this is the final
// read) until none arrives for faultDrainIdle, and counts them by meta.id.
func faultDrain(t *testing.T, fb *faultBroker, addr string) faultDrained {
	t.Helper()
	conn := fb.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	r, err := conn.Session.NewReceiver(ctx, addr, &amqp.ReceiverOptions{
		SourceCapabilities:        []string{"queue"},
		Credit:                    500,
		RequestedSenderSettleMode: amqp.SenderSettleModeSettled.Ptr(),
	})
	cancel()
	require.NoError(t, err, "attach a receiver to %s", addr)
	d := faultDrained{copies: map[string]int{}}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), faultDrainIdle)
		msg, err := r.Receive(ctx, nil)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		require.NoError(t, err, "receive from %s", addr)
		body, ok := msg.Value.(string)
		require.True(t, ok, "a message on %s without a string value body: %T", addr, msg.Value)
		env, err := artemis.Decode([]byte(body))
		require.NoError(t, err, "a message on %s that is not an envelope: %s", addr, body)
		d.copies[env.Meta.ID]++
		d.total++
		d.envs = append(d.envs, env)
	}
	ctx, cancel = context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	_ = r.Close(ctx)
	return d
}

// faultReports counts what a consumer reports, by kind.
type faultReports struct {
	mu      sync.Mutex
	byKind  map[string]int
	byID    map[error]map[string]int // kind -> meta.id -> reports
	samples map[string]string
	first   map[error]chan struct{} // closed on the first report of a kind
}

func newFaultReports(kinds ...error) *faultReports {
	r := &faultReports{byKind: map[string]int{}, byID: map[error]map[string]int{}, samples: map[string]string{},
		first: map[error]chan struct{}{}}
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
		name = de.Kind.Error() + " / " + de.Disposition.String()
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

func (r *faultReports) ids(kind error) map[string]int {
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

// TestFaultConsumerSurvivesBrokerKill publishes 10,000 durable messages,
// consumes them with a supervised Client.Consume (4 handlers, credit 10),
// SIGKILLs the broker after 3,000 handler calls and restarts it. The
// consumer must recover by itself and every message must be handled.
//
// Duplicates: a message is handled twice only when its handler ran but the
// broker had not made its accept durable when it died. Such a message is
// either
//
//   - one of the deliveries the receiver held unsettled at the kill: at
//     most credit, since go-amqp grants new credit only as deliveries are
//     settled. These are the ones in handlers and the ones prefetched,
//     which go-amqp still hands out after the connection is gone: the
//     Consumer runs their handlers, their accepts fail (ErrSettlement) and
//     Artemis redelivers them after the restart; or
//   - one whose accept a handler had just written when the broker died,
//     before Artemis journaled it (it writes acks asynchronously): the
//     allowance is one per handler goroutine.
//
// So duplicates <= credit + concurrency. Here the handlers park from the
// 3,000th call until the kill is done, so no accept is in flight when the
// broker dies and the duplicates are the deliveries held unsettled: the
// parked ones plus the prefetched ones handled on the dead link.
func TestFaultConsumerSurvivesBrokerKill(t *testing.T) {
	fb := requireFaultBroker(t)
	const (
		total       = 10000
		killAt      = 3000
		concurrency = 4
		credit      = 10
	)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	q := faultQueue("consume")
	sent := faultPublish(t, ctx, fb, q, total, 8)

	var (
		mu       sync.Mutex
		handled  = make(map[string]int, total)
		mismatch []string
		calls    atomic.Int64
		killNow  = make(chan struct{})
		killDone = make(chan struct{})
		allDone  = make(chan struct{})
		killOnce sync.Once
	)
	releaseHandlers := func() { killOnce.Do(func() { close(killDone) }) }
	defer releaseHandlers() // never leave a handler parked
	uniqueHandled := func() int { mu.Lock(); defer mu.Unlock(); return len(handled) }

	reports := newFaultReports(artemis.ErrSettlement)
	cons := artemis.NewConsumer(artemis.Handlers{faultURN: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		var d faultData
		bindErr := env.Bind(&d)
		n := calls.Add(1)
		mu.Lock()
		if seq, ok := sent[env.Meta.ID]; !ok || bindErr != nil || seq != d.Seq {
			mismatch = append(mismatch, fmt.Sprintf("%s seq %d (bind: %v)", env.Meta.ID, d.Seq, bindErr))
		}
		handled[env.Meta.ID]++
		if len(handled) == total && handled[env.Meta.ID] == 1 {
			close(allDone)
		}
		mu.Unlock()
		if n == killAt {
			close(killNow)
		}
		if n >= killAt {
			<-killDone // park until the broker is dead
		}
		return nil
	}}, artemis.WithConcurrency(concurrency), artemis.WithOnError(reports.onError))

	events := newFaultEvents()
	c := faultDial(t, fb, events.on)
	start := time.Now()
	stop := consumeInBackground(t, c, q, cons, &artemis.ConsumeOptions{Credit: credit}, faultWait)
	events.wait(t, 0, artemis.EventConsumerAttached, q, faultWait)

	waitClosed(t, killNow, 3*time.Minute, func() string { return fmt.Sprintf("%d handler calls (have %d)", killAt, calls.Load()) })
	mark := events.mark()
	killStart := time.Now()
	fb.kill(t)
	callsAtKill := calls.Load()
	releaseHandlers()
	events.wait(t, mark, artemis.EventConsumerLost, q, faultWait)
	events.wait(t, mark, artemis.EventDisconnected, "", faultWait)
	// The consumer is trying while the broker is down.
	events.wait(t, mark, artemis.EventDialFailed, "", faultWait)
	events.wait(t, mark, artemis.EventBackoff, q, faultWait)
	callsBeforeRestart := calls.Load()
	restartStart := time.Now()
	fb.restart(t)
	restarted := time.Now()
	events.wait(t, mark, artemis.EventReconnected, "", faultWait)
	events.wait(t, mark, artemis.EventConsumerResumed, q, faultWait)
	resumed := time.Now()

	waitClosed(t, allDone, 3*time.Minute, func() string {
		return fmt.Sprintf("every message to be handled (have %d of %d)", uniqueHandled(), total)
	})
	stop()
	elapsed := time.Since(start)
	left := faultDrain(t, fb, q)

	mu.Lock()
	unique := len(handled)
	var lost, duplicated, maxCopies int
	for id := range sent {
		n := handled[id]
		if n == 0 {
			lost++
		}
		if n > 1 {
			duplicated += n - 1
		}
		maxCopies = max(maxCopies, n)
	}
	badData := append([]string(nil), mismatch...)
	mu.Unlock()

	t.Logf("FIGURES consumer: sent=%d handled(unique)=%d lost=%d duplicated=%d (max copies of one message %d, bound credit+concurrency=%d) "+
		"handler calls=%d (%d when the broker died, %d before its restart) left on queue=%d",
		total, unique, lost, duplicated, maxCopies, credit+concurrency, calls.Load(), callsAtKill, callsBeforeRestart, left.total)
	t.Logf("FIGURES consumer: kill->restart issued %v, restart took %v, resumed %v after the restart, consume run %v",
		restartStart.Sub(killStart).Round(time.Millisecond), restarted.Sub(restartStart).Round(time.Millisecond),
		resumed.Sub(restarted).Round(time.Millisecond), elapsed.Round(time.Millisecond))
	t.Logf("FIGURES consumer: events after the kill: %s", events.summary(mark))
	reports.log(t)

	assert.Equal(t, total, unique, "every message was handled")
	assert.Zero(t, lost, "lost messages")
	assert.Empty(t, badData, "handled messages that were not the ones sent")
	assert.LessOrEqual(t, duplicated, credit+concurrency, "duplicates stay within the in-flight window")
	assert.GreaterOrEqual(t, duplicated, 1, "the handler parked across the kill could not settle, so it was redelivered")
	assert.GreaterOrEqual(t, len(reports.ids(artemis.ErrSettlement)), 1, "the failed accepts were reported as ErrSettlement")
	assert.Zero(t, left.total, "nothing left on the queue")
	assert.Equal(t, 1, events.count(0, artemis.EventConsumerAttached), "attached once")
	assert.GreaterOrEqual(t, events.count(mark, artemis.EventConsumerResumed), 1)
}

// faultFailure is the handler's error in the dead-letter test.
type faultFailure struct{}

func (*faultFailure) Error() string { return "ledger rejected the entry" }

// TestFaultDeadLetterLinkLostAndBack runs a consumer whose handler always
// fails, so each message ends on <queue>.dlq after 2 deliveries, and takes
// the dead-letter link away mid-run by SIGKILLing the broker while
// handlers are about to dead-letter.
//
// (Deleting the dead-letter queue or its address through the CLI does not
// detach an attached AMQP sender link on Artemis 2.40: later transfers are
// accepted and auto-create the queue again. A kill does detach it.)
//
// The dead-letter writes attempted while the broker is down fail and are
// reported as ErrDeadLetterFailed; their sources are never accepted, so
// Artemis redelivers them after the restart, and once the Client has
// re-attached the dead-letter link every message is on the DLQ, counted
// by meta.id.
func TestFaultDeadLetterLinkLostAndBack(t *testing.T) {
	fb := requireFaultBroker(t)
	const (
		total       = 600
		killAt      = 200 // deliveries at the limit before the kill
		concurrency = 4
		credit      = 10
		maxTries    = 2
	)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q := faultQueue("dlq")
	dlq := q + ".dlq"
	sent := faultPublish(t, ctx, fb, q, total, 4)

	var (
		limitCalls atomic.Int64
		calls      atomic.Int64
		killNow    = make(chan struct{})
		killDone   = make(chan struct{})
		killOnce   sync.Once
	)
	releaseHandlers := func() { killOnce.Do(func() { close(killDone) }) }
	defer releaseHandlers()

	reports := newFaultReports(artemis.ErrHandlerFailed, artemis.ErrDeadLetterFailed, artemis.ErrSettlement)
	var dlMu sync.Mutex
	deadLettered := map[string]int{}
	allDone := make(chan struct{})
	onError := func(ctx context.Context, err error, env *artemis.Envelope, msg *amqp.Message) {
		reports.onError(ctx, err, env, msg)
		var de *artemis.DeliveryError
		if errors.As(err, &de) && errors.Is(de, artemis.ErrHandlerFailed) && de.Disposition == artemis.DeadLettered {
			dlMu.Lock()
			deadLettered[de.MessageID]++
			if len(deadLettered) == total && deadLettered[de.MessageID] == 1 {
				close(allDone)
			}
			dlMu.Unlock()
		}
	}
	cons := artemis.NewConsumer(artemis.Handlers{faultURN: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		calls.Add(1)
		if env.Attempts >= maxTries-1 {
			n := limitCalls.Add(1)
			if n == killAt {
				close(killNow)
			}
			if n >= killAt {
				<-killDone // dead-letter only once the broker is dead
			}
		}
		return &faultFailure{}
	}},
		artemis.WithMaxTries(maxTries),
		artemis.WithConcurrency(concurrency),
		artemis.WithDeadLetterTimeout(10*time.Second),
		artemis.WithDeadLetterRetryDelay(100*time.Millisecond),
		artemis.WithOnError(onError))

	events := newFaultEvents()
	c := faultDial(t, fb, events.on)
	stop := consumeInBackground(t, c, q, cons, &artemis.ConsumeOptions{Credit: credit}, faultWait)
	events.wait(t, 0, artemis.EventSenderAttached, dlq, faultWait)
	events.wait(t, 0, artemis.EventConsumerAttached, q, faultWait)

	waitClosed(t, killNow, 3*time.Minute, func() string {
		return fmt.Sprintf("%d deliveries at the limit (have %d)", killAt, limitCalls.Load())
	})
	mark := events.mark()
	fb.kill(t)
	releaseHandlers()
	// The parked handlers dead-letter into a dead broker: reported, held,
	// released (the release fails too: the link is gone).
	waitClosed(t, reports.first[artemis.ErrDeadLetterFailed], faultWait, func() string { return "an ErrDeadLetterFailed report" })
	events.wait(t, mark, artemis.EventConsumerLost, q, faultWait)
	failedDuringOutage := reports.ids(artemis.ErrDeadLetterFailed)
	fb.restart(t)
	events.wait(t, mark, artemis.EventConsumerResumed, q, faultWait)
	events.wait(t, mark, artemis.EventSenderReattached, dlq, faultWait)

	waitClosed(t, allDone, 3*time.Minute, func() string {
		dlMu.Lock()
		defer dlMu.Unlock()
		return fmt.Sprintf("every message to be dead-lettered (have %d of %d)", len(deadLettered), total)
	})
	stop()
	onDLQ := faultDrain(t, fb, dlq)
	left := faultDrain(t, fb, q)

	var missing, duplicated, foreign, badBlock int
	for id := range sent {
		n := onDLQ.copies[id]
		if n == 0 {
			missing++
		}
		if n > 1 {
			duplicated += n - 1
		}
	}
	for id := range onDLQ.copies {
		if _, ok := sent[id]; !ok {
			foreign++
		}
	}
	for _, env := range onDLQ.envs {
		dl := env.DeadLetter
		if dl == nil || dl.Reason != artemis.ReasonFailed || dl.OriginalQueue != q || dl.Error == nil || *dl.Error != "ledger rejected the entry" {
			badBlock++
		}
	}
	var failedThenDLQ int
	for id := range failedDuringOutage {
		if onDLQ.copies[id] > 0 {
			failedThenDLQ++
		}
	}

	t.Logf("FIGURES dead-letter: sent=%d on DLQ(unique)=%d missing=%d duplicated=%d DLQ copies=%d left on source=%d handler calls=%d",
		total, len(onDLQ.copies), missing, duplicated, onDLQ.total, left.total, calls.Load())
	t.Logf("FIGURES dead-letter: writes failed while the broker was down: %d messages (%d of them on the DLQ now)",
		len(failedDuringOutage), failedThenDLQ)
	t.Logf("FIGURES dead-letter: events after the kill: %s", events.summary(mark))
	reports.log(t)

	assert.Zero(t, missing, "messages neither dead-lettered nor left on the source")
	assert.Zero(t, foreign, "DLQ copies of messages that were not sent")
	assert.Zero(t, badBlock, "DLQ copies without the right dead_letter block")
	assert.LessOrEqual(t, duplicated, credit+concurrency, "duplicate DLQ copies stay within the in-flight window")
	assert.NotEmpty(t, failedDuringOutage, "dead-letter writes failed while the link was gone")
	assert.Equal(t, len(failedDuringOutage), failedThenDLQ, "each source whose dead-letter write failed was released, not lost, and ended on the DLQ")
	assert.Zero(t, left.total, "nothing left on the source queue")
}

// TestFaultPublisherSurvivesBrokerKill publishes 5,000 messages from 8
// goroutines through one ClientPublisher with duplicate detection while
// the broker is SIGKILLed and restarted. A publish that fails is retried
// by the caller with the same envelope (same meta.id, same duplicate id),
// as Client.Publisher's documentation says to. Every publish that returned
// nil must be on the queue, each message exactly once.
func TestFaultPublisherSurvivesBrokerKill(t *testing.T) {
	fb := requireFaultBroker(t)
	const (
		total     = 5000
		workers   = 8
		killAfter = 1500 // acknowledged publishes
	)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	q := faultQueue("publish")
	events := newFaultEvents()
	c := faultDial(t, fb, events.on)
	pub, err := c.Publisher(ctx, q, artemis.WithDuplicateDetection())
	require.NoError(t, err)

	var (
		mu        sync.Mutex
		acked     = make(map[string]int, total) // meta.id -> seq, publishes that returned nil
		failures  = map[string]int{}
		samples   = map[string]string{}
		retried   = map[string]bool{} // meta.ids sent again after an error
		ambiguous = map[string]bool{} // meta.ids with an unknown outcome
		next      atomic.Int64
		okCount   atomic.Int64
		killNow   = make(chan struct{})
		firstErr  = make(chan struct{})
		errOnce   sync.Once
		wg        sync.WaitGroup
		fatal     = make(chan error, workers)
	)
	pause := artemis.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.5}
	classify := func(err error) string {
		switch {
		case errors.Is(err, artemis.ErrOutcomeUnknown):
			return "ErrOutcomeUnknown"
		case errors.Is(err, artemis.ErrConnect):
			return "ErrConnect"
		case errors.Is(err, artemis.ErrNotAccepted):
			return "ErrNotAccepted"
		case errors.Is(err, context.DeadlineExceeded):
			return "deadline"
		}
		return "other"
	}
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int(next.Add(1) - 1); seq < total; seq = int(next.Add(1) - 1) {
				env, err := artemis.NewEnvelope(faultURN, faultData{Seq: seq}, artemis.EnvelopeQueue(q))
				if err != nil {
					fatal <- err
					return
				}
				for attempt := 0; ; attempt++ {
					pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
					id, err := pub.PublishEnvelope(pctx, env)
					pcancel()
					if err == nil {
						mu.Lock()
						acked[id] = seq
						if attempt > 0 {
							retried[id] = true
						}
						mu.Unlock()
						if okCount.Add(1) == killAfter {
							close(killNow)
						}
						break
					}
					if ctx.Err() != nil {
						fatal <- fmt.Errorf("seq %d: the test's deadline passed: %w", seq, err)
						return
					}
					kind := classify(err)
					mu.Lock()
					failures[kind]++
					if _, ok := samples[kind]; !ok {
						samples[kind] = err.Error()
					}
					if kind == "ErrOutcomeUnknown" {
						ambiguous[env.Meta.ID] = true
					}
					mu.Unlock()
					errOnce.Do(func() { close(firstErr) })
					select {
					case <-time.After(pause.Delay(attempt, rand.Float64())):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()

	waitClosed(t, killNow, 3*time.Minute, func() string { return fmt.Sprintf("%d acknowledged publishes (have %d)", killAfter, okCount.Load()) })
	mark := events.mark()
	fb.kill(t)
	okAtKill := okCount.Load()
	waitClosed(t, firstErr, faultWait, func() string { return "a failed publish" })
	events.wait(t, mark, artemis.EventDisconnected, "", faultWait)
	fb.restart(t)
	events.wait(t, mark, artemis.EventReconnected, "", faultWait)
	waitClosed(t, workersDone, 4*time.Minute, func() string { return fmt.Sprintf("all publishes (have %d of %d)", okCount.Load(), total) })
	elapsed := time.Since(start)
	close(fatal)
	for err := range fatal {
		require.NoError(t, err)
	}
	require.NoError(t, pub.Close(ctx))
	stored := faultDrain(t, fb, q)

	mu.Lock()
	defer mu.Unlock()
	var missing, duplicated, foreign int
	seqs := map[int]int{}
	for id, seq := range acked {
		n := stored.copies[id]
		if n == 0 {
			missing++
		}
		if n > 1 {
			duplicated += n - 1
		}
		seqs[seq] += n
	}
	for id := range stored.copies {
		if _, ok := acked[id]; !ok {
			foreign++
		}
	}
	var retriedStoredOnce, ambiguousStoredOnce int
	for id := range retried {
		if stored.copies[id] == 1 {
			retriedStoredOnce++
		}
	}
	for id := range ambiguous {
		if stored.copies[id] == 1 {
			ambiguousStoredOnce++
		}
	}
	errTotal := 0
	for _, n := range failures {
		errTotal += n
	}

	t.Logf("FIGURES publisher: publishes acknowledged=%d (at kill %d) on queue=%d (unique %d) missing=%d duplicated=%d foreign=%d in %v",
		len(acked), okAtKill, stored.total, len(stored.copies), missing, duplicated, foreign, elapsed.Round(time.Millisecond))
	t.Logf("FIGURES publisher: publishes that returned an error=%d %v; messages resent after an error=%d (stored once: %d), "+
		"with an unknown outcome=%d (stored once: %d)",
		errTotal, failures, len(retried), retriedStoredOnce, len(ambiguous), ambiguousStoredOnce)
	t.Logf("FIGURES publisher: library retries (EventPublishRetried)=%d; events after the kill: %s",
		events.count(mark, artemis.EventPublishRetried), events.summary(mark))
	for kind, s := range samples {
		t.Logf("  %s, e.g. %s", kind, s)
	}

	assert.Len(t, acked, total, "every message was acknowledged in the end")
	assert.Zero(t, missing, "acknowledged publishes missing from the queue")
	assert.Zero(t, duplicated, "copies beyond one per meta.id (duplicate detection)")
	assert.Zero(t, foreign, "messages on the queue that no publish acknowledged")
	assert.Len(t, seqs, total, "every sequence number is on the queue")
	for seq, n := range seqs {
		if n != 1 {
			t.Errorf("seq %d stored %d times", seq, n)
		}
	}
	assert.Positive(t, errTotal, "the kill made publishes fail")
	assert.Equal(t, len(retried), retriedStoredOnce, "messages resent after an error are stored once")
	assert.Zero(t, failures["other"], "publish errors other than ErrOutcomeUnknown, ErrConnect, ErrNotAccepted or a deadline")
}
