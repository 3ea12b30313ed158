package faults_test

// Shared pieces of the fault scenarios of issue 13 (resets, stalls, cuts,
// a black-holed URL, process and broker kills, the HA failover): each
// scenario runs on fresh queues, accounts for every message by meta.id in
// an internal/ledger Ledger, and prints one line,
//
//	fault: <scenario>: lost 0, stored twice 0, handler duplicates N (bound M ...), ... resume X ms, ...
//
// with fmt.Printf, so scripts/faults shows it whether -v is on or not.
//
// Where a scenario publishes and consumes at once it does so on two
// queues: the publishers write to a queue nobody consumes (drained at the
// end, which counts the copies stored), and the consumer reads a queue the
// test filled before the fault with plain acknowledged publishes (one copy
// each, so every handler call beyond one per id is a redelivery the fault
// caused). On one queue a second stored copy and a redelivery would look
// the same to the handler.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/faultproxy"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// defaultCredit is the link credit Client.Consume grants a Consumer with
// concurrency handlers without WithCredit: the default that WithCredit
// documents, max(2*concurrency, artemis.MinCredit) (100).
// (The library's unit tests hold Consume to the same figures.)
func defaultCredit(concurrency int) int { return max(2*concurrency, artemis.MinCredit) }

// faultConsumeWindow is the window for ledger.ConsumeWindow: a consumer
// with concurrency handlers resumed only once it handled more new ids than
// it could have held when the fault came: its default credit (deliveries
// a receiver may hold prefetched, which it can still hand to handlers
// without a connection) and one in each handler.
func faultConsumeWindow(concurrency int) int { return defaultCredit(concurrency) + concurrency }

// faultDefaultClient dials urls with the default ClientOptions (only the
// event hook set): the scenarios measure what a user gets out of the box.
func faultDefaultClient(t *testing.T, urls []string, onEvent func(artemis.ConnectionEvent)) *artemis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	c, err := artemis.Dial(ctx, urls, &artemis.ClientOptions{OnEvent: onEvent})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// faultFill puts n messages on q straight to the broker (no proxy, no
// fault) and records them as acknowledged in l.
func faultFill(t *testing.T, ctx context.Context, fb *faultBroker, q string, n int, l *ledger.Ledger) {
	t.Helper()
	faultSent(t, ctx, fb, q, n, 8, l)
}

// faultPubStats is what a publish loop saw.
type faultPubStats struct {
	mu         sync.Mutex
	errs       map[string]int // by kind
	samples    map[string]string
	calls      int
	slow       int           // publishes that took longer than the loop's limit
	maxLatency time.Duration // longest single Publish call
}

func (s *faultPubStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("publish calls %d, publish errors %d %v, longest publish %d ms",
		s.calls, ledger.Total(s.errs), s.errs, s.maxLatency.Milliseconds())
}

func faultErrKind(err error) string {
	switch {
	case errors.Is(err, artemis.ErrOutcomeUnknown):
		return "ErrOutcomeUnknown"
	case errors.Is(err, artemis.ErrConnect):
		return "ErrConnect"
	case errors.Is(err, artemis.ErrNotAccepted):
		return "ErrNotAccepted"
	case errors.Is(err, artemis.ErrClosed):
		return "ErrClosed"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "other"
}

// faultPublishLoop publishes total envelopes (seq 0..total-1) to q through
// pub from workers goroutines. Each Publish gets its own context of
// perCall; a failed one is sent again with the same envelope (same meta.id,
// same duplicate id) after a short pause, until it is acknowledged or ctx
// ends. Publishes longer than limit are counted as slow. A worker waits
// pace after each acknowledged publish (0: none). The returned channel is
// closed when every worker is done.
func faultPublishLoop(ctx context.Context, pub *artemis.ClientPublisher, q string, total, workers int,
	perCall, limit, pace time.Duration, l *ledger.Ledger, st *faultPubStats,
) <-chan struct{} {
	st.mu.Lock()
	if st.errs == nil {
		st.errs, st.samples = map[string]int{}, map[string]string{}
	}
	st.mu.Unlock()
	pause := artemis.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond, Multiplier: 2, Jitter: 0.5}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int(next.Add(1) - 1); seq < total && ctx.Err() == nil; seq = int(next.Add(1) - 1) {
				env, err := artemis.NewEnvelope(faultURN, faultData{Seq: seq}, artemis.EnvelopeQueue(q))
				if err != nil {
					panic(err) // a plain struct always encodes
				}
				for attempt := 0; ctx.Err() == nil; attempt++ {
					pctx, cancel := context.WithTimeout(ctx, perCall)
					start := time.Now()
					id, err := pub.Publish(pctx, env)
					took := time.Since(start)
					cancel()
					st.mu.Lock()
					st.calls++
					st.maxLatency = max(st.maxLatency, took)
					if took > limit {
						st.slow++
					}
					if err != nil {
						kind := faultErrKind(err)
						st.errs[kind]++
						if _, ok := st.samples[kind]; !ok {
							st.samples[kind] = err.Error()
						}
					}
					st.mu.Unlock()
					if err == nil {
						l.Acked(id)
						if pace > 0 {
							select {
							case <-time.After(pace):
							case <-ctx.Done():
							}
						}
						break
					}
					if errors.Is(err, artemis.ErrOutcomeUnknown) {
						l.Unknown(env.Meta.ID)
					}
					select {
					case <-time.After(pause.Delay(attempt, rand.Float64())):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// faultLedgerConsumer is a Consumer whose handler records each call in l
// and works for work (a busy service) before returning nil.
func faultLedgerConsumer(t *testing.T, l *ledger.Ledger, concurrency int, work time.Duration, opts ...artemis.ConsumerOption) *artemis.Consumer {
	t.Helper()
	h := func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		done := l.Start(env.Meta.ID)
		defer done(true)
		if work > 0 {
			time.Sleep(work) // the work a handler does; not a synchronisation
		}
		return nil
	}
	return testkit.MustConsumer(t, artemis.Handlers{faultURN: h},
		append([]artemis.ConsumerOption{artemis.WithConcurrency(concurrency)}, opts...)...)
}

// faultRecordLeft drains each queue on b into l as left there.
func faultRecordLeft(t *testing.T, b *brokertest.Broker, l *ledger.Ledger, queues ...string) {
	t.Helper()
	for _, q := range queues {
		l.Left(q, faultDrain(t, b, q).copies)
	}
}

// faultRecordStoredAndLeft drains q (a queue only publishers wrote to) on b
// into l: its copies are both what was stored and what is left. It returns
// what the drain found.
func faultRecordStoredAndLeft(t *testing.T, b *brokertest.Broker, l *ledger.Ledger, q string) faultDrained {
	t.Helper()
	d := faultDrain(t, b, q)
	l.Stored(d.copies)
	l.Left(q, d.copies)
	return d
}

// faultReport prints the scenario's line and asserts the targets every
// scenario shares: nothing lost, nothing stored twice, handler duplicates
// within the bound.
func faultReport(t *testing.T, l *ledger.Ledger, scenario string, extra ...string) ledger.Figures {
	t.Helper()
	line := l.Line(scenario, extra...)
	fmt.Printf("%s\n", line) // stdout, not t.Log: at the start of a line, and not only with -v in directory mode
	f := l.Figures()
	assert.Zero(t, f.Lost, "acknowledged messages neither handled nor left on a queue")
	assert.Zero(t, f.StoredTwice, "copies stored beyond one per meta.id")
	assert.Zero(t, f.StoredForeign, "stored messages that no publish sent")
	assert.LessOrEqual(t, f.HandlerDuplicates, f.Bound(),
		"handler-visible duplicates beyond the deliveries in a handler at the cuts (plus the slack)")
	return f
}

// faultRate is n over d, per second.
func faultRate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// faultEvery runs fn every [lo, hi) (random) until stop is closed, and
// returns a channel closed once it stopped, with the number of runs.
func faultEvery(stop <-chan struct{}, lo, hi time.Duration, seed uint64, fn func()) (done <-chan int) {
	out := make(chan int, 1)
	rng := rand.New(rand.NewPCG(seed, seed+1))
	go func() {
		n := 0
		for {
			d := lo + time.Duration(rng.Int64N(int64(hi-lo)))
			select {
			case <-stop:
				out <- n
				return
			case <-time.After(d):
			}
			select {
			case <-stop:
				out <- n
				return
			default:
			}
			fn()
			n++
		}
	}()
	return out
}

// faultUnderWay waits (up to 2 minutes, polling two ledger counters) until
// acked() acknowledged publishes and at least as many handled messages,
// and fails the test unless both got there; when says where ("" or, say,
// " before the stall").
func faultUnderWay(t *testing.T, l *ledger.Ledger, acked func() int, at int, when string) {
	t.Helper()
	until := time.Now().Add(2 * time.Minute)
	for (acked() < at || l.Handled() < at) && time.Now().Before(until) {
		time.Sleep(10 * time.Millisecond) // polls two ledger counters; bounded
	}
	require.GreaterOrEqual(t, acked(), at, "publishing under way"+when)
	require.GreaterOrEqual(t, l.Handled(), at, "consuming under way"+when)
}

// faultWaitDone waits (3 minutes each) for the publish loop to be done and
// for consumes messages to be handled, failing the test with the counts
// and the events since mark.
func faultWaitDone(t *testing.T, l *ledger.Ledger, pubDone <-chan struct{}, acked func() int, publishes, consumes int,
	events *faultEvents, mark int,
) {
	t.Helper()
	waitClosed(t, pubDone, 3*time.Minute, func() string { return fmt.Sprintf("every publish (%d of %d)", acked(), publishes) })
	waitClosed(t, l.HandledAtLeast(consumes), 3*time.Minute, func() string {
		return fmt.Sprintf("every message handled (%d of %d); events: %s", l.Handled(), consumes, events.summary(mark))
	})
}

// faultCloseAndDrain closes pub and drains both queues on b into l: qp,
// which only the publishers wrote to (stored and left), and qc, the
// consumer's (left).
func faultCloseAndDrain(t *testing.T, b *brokertest.Broker, l *ledger.Ledger, pub *artemis.ClientPublisher, qp, qc string) {
	t.Helper()
	require.NoError(t, pub.Close(context.Background()))
	faultRecordStoredAndLeft(t, b, l, qp)
	faultRecordLeft(t, b, l, qc)
}

// faultLossWatch notes the handler calls so far when the Client first
// reports a loss (EventDisconnected or EventConsumerLost) while armed.
type faultLossWatch struct {
	armed       atomic.Bool
	callsAtLoss atomic.Int64 // -1: no loss seen while armed
}

func newFaultLossWatch() *faultLossWatch {
	w := &faultLossWatch{}
	w.callsAtLoss.Store(-1)
	return w
}

func (w *faultLossWatch) on(ev artemis.ConnectionEvent, l *ledger.Ledger) {
	if w.armed.Load() && (ev.Kind == artemis.EventDisconnected || ev.Kind == artemis.EventConsumerLost) {
		w.callsAtLoss.CompareAndSwap(-1, int64(l.Calls()))
	}
}

// startedBlind is the handler calls that started after the fault (calls
// at) before the Client saw the loss: all those until callsBy if it never
// saw it before then.
func (w *faultLossWatch) startedBlind(at, callsBy int) int {
	if n := w.callsAtLoss.Load(); n >= 0 && int(n) < callsBy {
		return int(n) - at
	}
	return callsBy - at
}

// faultSetup says what a fault scenario runs before its fault: what it
// publishes and consumes, through which proxies, with which Client.
type faultSetup struct {
	timeout        time.Duration // the scenario's deadline (faultRun.ctx)
	pubQueue       string        // faultQueue kind of the queue only the publishers write to
	conQueue       string        // faultQueue kind of the queue the consumer reads ("": none)
	publishes      int           // envelopes the publish loop sends (seq 0..publishes-1)
	consumes       int           // messages filled into the consumer's queue before the fault
	concurrency    int           // handlers
	work           time.Duration // each handler call's work
	consumeWindow  bool          // l.ConsumeWindow(faultConsumeWindow(concurrency))
	publishWindow  int           // l.PublishWindow(publishWindow) when above 0
	seeds          []uint64      // one fault proxy per seed, dialled in this order
	direct         bool          // no proxy: faultDial straight to the broker (quick re-attach)
	prepare        func(proxies []*faultproxy.Proxy)
	onEvent        func(ev artemis.ConnectionEvent, l *ledger.Ledger) // before the loss watch and the events see ev
	perCall, limit time.Duration                                      // faultPublishLoop's (0: 30 s each)
	pace           time.Duration                                      // faultPublishLoop's
}

// faultRun is a fault scenario's skeleton, built by faultStart: fresh
// queues, the ledger, the consumer's queue filled, the proxies, the events
// and the loss watch, the Client, a duplicate-detecting publisher; start
// runs the publish loop and the consumer, fault applies the fault with the
// handlers counted, waitDone and stop finish the accounting.
type faultRun struct {
	t        *testing.T
	fb       *faultBroker
	set      faultSetup
	ctx      context.Context
	l        *ledger.Ledger
	qp, qc   string
	proxies  []*faultproxy.Proxy
	urls     []string // the proxies' URLs, in order
	events   *faultEvents
	loss     *faultLossWatch
	c        *artemis.Client
	pub      *artemis.ClientPublisher
	st       faultPubStats
	pubDone  <-chan struct{}
	stopCons func()
}

// faultStart builds the scenario set describes, on the fault broker. Its
// context ends set.timeout from now or when the test ends.
func faultStart(t *testing.T, set faultSetup) *faultRun {
	t.Helper()
	fb := requireFaultBroker(t)
	if set.perCall == 0 {
		set.perCall = 30 * time.Second
	}
	if set.limit == 0 {
		set.limit = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), set.timeout)
	t.Cleanup(cancel)
	r := &faultRun{t: t, fb: fb, set: set, ctx: ctx, l: ledger.New(), qp: faultQueue(set.pubQueue)}
	if set.consumeWindow {
		r.l.ConsumeWindow(faultConsumeWindow(set.concurrency))
	}
	if set.publishWindow > 0 {
		r.l.PublishWindow(set.publishWindow)
	}
	if set.conQueue != "" {
		r.qc = faultQueue(set.conQueue)
		faultFill(t, ctx, fb, r.qc, set.consumes, r.l)
	}
	for _, seed := range set.seeds {
		p, through := testkit.FaultProxy(t, fb.Broker, seed)
		r.proxies, r.urls = append(r.proxies, p), append(r.urls, through)
	}
	if set.prepare != nil {
		set.prepare(r.proxies)
	}
	r.events, r.loss = newFaultEvents(), newFaultLossWatch()
	onEvent := func(ev artemis.ConnectionEvent) {
		if set.onEvent != nil {
			set.onEvent(ev, r.l)
		}
		r.loss.on(ev, r.l)
		r.events.on(ev)
	}
	if set.direct {
		r.c = faultDial(t, fb, onEvent)
	} else {
		r.c = faultDefaultClient(t, r.urls, onEvent)
	}
	// Cleanups run last in, first out: this one ends the scenario's calls
	// before the Client and the proxies close (the first covers a failure
	// before this point).
	t.Cleanup(cancel)
	var err error
	r.pub, err = r.c.Publisher(ctx, r.qp, artemis.WithDuplicateDetection())
	require.NoError(t, err)
	return r
}

// start runs the publish loop on ctx (r.ctx or one derived from it) and,
// when there is a consumer's queue, the ledger's consumer in the
// background.
func (r *faultRun) start(ctx context.Context) {
	s := r.set
	r.pubDone = faultPublishLoop(ctx, r.pub, r.qp, s.publishes, 8, s.perCall, s.limit, s.pace, r.l, &r.st)
	if r.qc != "" {
		r.stopCons = testkit.ConsumeInBackground(r.t, r.c, r.qc, faultLedgerConsumer(r.t, r.l, s.concurrency, s.work), faultWait)
	}
}

// fault applies fault inside the ledger's cut, with the loss watch armed,
// and returns the event mark taken before it, the deliveries in a handler
// at the fault and the handler calls by then.
func (r *faultRun) fault(fault func()) (mark, inHandler, callsAt int) {
	mark = r.events.mark()
	inHandler = r.l.CutAround(0, func() {
		callsAt = r.l.Calls()
		r.loss.armed.Store(true)
		fault()
	})
	return mark, inHandler, callsAt
}

// waitDone waits for the publish loop and for every filled message to be
// handled (faultWaitDone).
func (r *faultRun) waitDone(acked func() int, mark int) {
	r.t.Helper()
	faultWaitDone(r.t, r.l, r.pubDone, acked, r.set.publishes, r.set.consumes, r.events, mark)
}

// stop stops the consumer, runs beforeDrain (when not nil), closes the
// publisher and drains both queues into the ledger.
func (r *faultRun) stop(beforeDrain func()) {
	r.t.Helper()
	r.stopCons()
	if beforeDrain != nil {
		beforeDrain()
	}
	faultCloseAndDrain(r.t, r.fb.Broker, r.l, r.pub, r.qp, r.qc)
}

// creditFloor raises the handler-duplicate bound to the link credit per
// cut when its parts come to less. The broker holds at most Credit
// unsettled deliveries on the link (go-amqp grants credit only as
// deliveries are settled, and the flow frame follows the dispositions that
// freed it), so a cut of the network brings back at most that many, and
// each may have been handled already: short handler calls can have more
// than the one accept per handler in flight that the slack counts. Not for
// a broker kill (acks it had not yet written to its journal come back
// too). It returns the figure for the line.
func (r *faultRun) creditFloor() string {
	credit := defaultCredit(r.set.concurrency)
	f := r.l.Figures()
	if floor := f.Cuts * credit; f.Bound() < floor {
		r.l.AddSlack(floor - f.Bound())
		return fmt.Sprintf("bound raised from %d to the link credit %d per cut", f.Bound(), credit)
	}
	return fmt.Sprintf("link credit %d", credit)
}

// addBlindSlack adds the handler-duplicate bound's second part to the
// ledger: the handler calls that started after the fault (callsAt) before
// the Client saw the loss (all of them until callsBy if it did not), plus
// one accept in flight per handler. It returns the first number.
func (r *faultRun) addBlindSlack(callsAt, callsBy int) int {
	startedBlind := r.loss.startedBlind(callsAt, callsBy)
	r.l.AddSlack(startedBlind + r.set.concurrency)
	return startedBlind
}
