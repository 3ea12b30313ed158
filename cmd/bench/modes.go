package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// clientSide runs Client.Consume for a whole measurement, with a handler
// that counts and holds: a segment opens a gate of k messages, and the
// handlers past the k-th wait for the next one. So the receiver stays
// attached, with its credit, from segment to segment, as the raw side's.
type clientSide struct {
	client  *artemis.Client
	cancel  context.CancelFunc
	done    chan error
	cur     atomic.Pointer[gate]
	handled atomic.Int64 // every accepted message
	timed   int          // the messages of the segments
	quit    chan struct{}
	stopped bool
}

type gate struct {
	target int64
	count  atomic.Int64
	full   chan struct{} // closed at the target-th message
	next   chan struct{} // closed when the next gate is in place
}

func newGate(target int) *gate {
	return &gate{target: int64(target), full: make(chan struct{}), next: make(chan struct{})}
}

func (r *runner) startClient(ctx context.Context, queue string, conc, credit int) (*clientSide, error) {
	c, err := r.dialClient(ctx, "babelqueue-bench-client")
	if err != nil {
		return nil, err
	}
	cs := &clientSide{client: c, done: make(chan error, 1), quit: make(chan struct{})}
	closed := newGate(0)
	close(closed.full)
	cs.cur.Store(closed)
	opts := []artemis.ConsumerOption{artemis.WithConcurrency(conc)}
	if credit > 0 { // credit 0: the defaults a user gets
		opts = append(opts, artemis.WithCredit(credit), artemis.WithoutDeadLetter())
	}
	cons, err := artemis.NewConsumer(artemis.Handlers{urn: cs.handle}, opts...)
	if err != nil {
		_ = c.Close(context.Background())
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cs.cancel = cancel
	go func() { cs.done <- c.Consume(cctx, queue, cons) }()
	return cs, nil
}

// dialClient dials a Client to the broker with the container id name.
func (r *runner) dialClient(ctx context.Context, name string) (*artemis.Client, error) {
	return artemis.Dial(ctx, []string{r.cfg.url}, &artemis.ClientOptions{ConnOptions: &amqp.ConnOptions{ContainerID: name}})
}

func (cs *clientSide) handle(context.Context, *artemis.Envelope, *amqp.Message) error {
	for {
		g := cs.cur.Load()
		if n := g.count.Add(1); n <= g.target {
			if n == g.target {
				close(g.full)
			}
			cs.handled.Add(1)
			return nil
		}
		select {
		case <-g.next:
		case <-cs.quit:
			cs.handled.Add(1)
			return nil
		}
	}
}

// segment lets k messages through and times them.
func (cs *clientSide) segment(ctx context.Context, k int) (result, error) {
	g := newGate(k)
	cs.timed += k
	prev := cs.cur.Swap(g)
	sw := startStopwatch()
	close(prev.next)
	select {
	case <-g.full:
		return sw.result(k), nil
	case err := <-cs.done:
		return sw.result(int(g.count.Load())), fmt.Errorf("Client.Consume returned: %w", err)
	case <-ctx.Done():
		return sw.result(int(g.count.Load())), ctx.Err()
	}
}

// stop ends Consume and returns how many messages the handlers accepted
// beyond the segments' (held at the end of the last one), and what Consume
// returned.
func (cs *clientSide) stop() (int, error) {
	if cs.stopped {
		return 0, nil
	}
	cs.stopped = true
	close(cs.quit)
	cs.cancel()
	err := <-cs.done
	_ = cs.client.Close(context.Background())
	return int(cs.handled.Load()) - cs.timed, err
}

// latency publishes at a fixed rate and measures, per message, the time
// from the start of the publish call to the entry of the handler (raw: to
// Receive returning it), on three sides in rotating segments: raw go-amqp,
// the library over go-amqp links (Publisher and Listen), and the Client
// (Client.Publisher and Client.Consume).
func (r *runner) latency() error {
	cfg, w := r.cfg, r.cfg.out
	segments := cfg.latSegments // per side
	segDur := cfg.latDur / time.Duration(segments)
	perSeg := int(float64(cfg.latRate) * segDur.Seconds())
	fmt.Fprintf(w, "\nlatency: %d msg/s for %s per side, in %d segments of %d messages per side, the sides rotating, after a warm-up segment per side; publish pipelined (PublishWithReceipt / SendWithReceipt), consume with 1 worker, credit 100; %s\n",
		cfg.latRate, cfg.latDur, segments, perSeg, loadavg())
	names := []string{"raw", "lib", "client"}
	// One unmeasured segment per side first, of a tenth of the size: the
	// first connections and queues of the run are not counted.
	for _, name := range names {
		if _, err := r.latencySegment(name, max(perSeg/10, 1)); err != nil {
			return fmt.Errorf("%s warm-up: %w", name, err)
		}
	}
	var all [3][]time.Duration
	var p99s [3][]float64
	// Every order of the three sides in turn, so none is always first.
	orders := [6][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}, {1, 0, 2}, {0, 2, 1}}
	for i := range segments {
		for _, j := range orders[i%len(orders)] {
			lat, err := pprofDo(names[j], "latency", func() ([]time.Duration, error) { return r.latencySegment(names[j], perSeg) })
			if err != nil {
				return fmt.Errorf("%s: %w", names[j], err)
			}
			all[j] = append(all[j], lat...)
			p99s[j] = append(p99s[j], ms(percentile(lat, 0.99)))
		}
	}
	fmt.Fprintf(w, "%-6s %9s %9s %9s %9s  %s\n", "side", "p50 ms", "p99 ms", "p999 ms", "max ms", "p99 per segment (ms)")
	for j, name := range names {
		l := all[j]
		fmt.Fprintf(w, "%-6s %9.2f %9.2f %9.2f %9.2f  %v\n", name, ms(percentile(l, 0.5)), ms(percentile(l, 0.99)), ms(percentile(l, 0.999)), ms(slices.Max(l)), fmtFloats(p99s[j]))
	}
	for j := 1; j < 3; j++ {
		fmt.Fprintf(w, "%s / raw: p50 %.2f, p99 %.2f, p999 %.2f, median of the segments' p99 %.2f (%d and %d messages; %s)\n", names[j],
			percentile(all[j], 0.5).Seconds()/percentile(all[0], 0.5).Seconds(),
			percentile(all[j], 0.99).Seconds()/percentile(all[0], 0.99).Seconds(),
			percentile(all[j], 0.999).Seconds()/percentile(all[0], 0.999).Seconds(),
			median(p99s[j])/median(p99s[0]), len(all[0]), len(all[j]), loadavg())
	}
	return nil
}

// pprofDo runs f under the labels side and scenario (and run, the two
// joined), as measure labels the throughput scenarios.
func pprofDo[T any](side, scenario string, f func() (T, error)) (T, error) {
	var v T
	var err error
	pprof.Do(context.Background(), pprof.Labels("side", side, "scenario", scenario, "run", side+"/"+scenario), func(context.Context) { v, err = f() })
	return v, err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtFloats(v []float64) string {
	s := ""
	for i, f := range v {
		if i > 0 {
			s += " "
		}
		s += strconv.FormatFloat(f, 'f', 2, 64)
	}
	return s
}

// percentile of the sorted copy of l (nearest rank).
func percentile(l []time.Duration, p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// latencySegment publishes n messages at the configured rate on one side
// and returns each one's latency.
func (r *runner) latencySegment(side string, n int) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
	defer cancel()
	q := r.cfg.prefix + ".latency." + side
	lib := side != "raw"
	var (
		snd       *amqp.Sender
		rcv       *amqp.Receiver
		pub       *artemis.Publisher
		consuming *artemis.Client // the client side's consumer
	)
	if side == "client" {
		// Two Clients, as the other sides have two connections.
		pc, err := r.dialClient(ctx, "babelqueue-bench-latency-publisher")
		if err != nil {
			return nil, err
		}
		defer pc.Close(context.Background())
		cp, err := pc.Publisher(ctx, q)
		if err != nil {
			return nil, err
		}
		pub = cp.Publisher
		if consuming, err = r.dialClient(ctx, "babelqueue-bench-latency-consumer"); err != nil {
			return nil, err
		}
		defer consuming.Close(context.Background())
	} else {
		pconn, psess, err := r.b.dial(ctx)
		if err != nil {
			return nil, err
		}
		defer pconn.Close()
		cconn, csess, err := r.b.dial(ctx)
		if err != nil {
			return nil, err
		}
		defer cconn.Close()
		if snd, err = queuelink.Sender(ctx, psess, q); err != nil {
			return nil, err
		}
		if rcv, err = queuelink.Receiver(ctx, csess, q, 100); err != nil {
			return nil, err
		}
		if lib {
			pub = artemis.NewPublisher(snd, q)
		}
	}

	var mu sync.Mutex
	starts := make(map[string]time.Time, n)
	entries := make(map[string]time.Time, n)
	got := make(chan struct{})
	var count atomic.Int64
	seen := func(id string, at time.Time) {
		mu.Lock()
		entries[id] = at
		mu.Unlock()
		if count.Add(1) == int64(n) {
			close(got)
		}
	}
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	if lib {
		cons, err := artemis.NewConsumer(artemis.Handlers{urn: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			seen(env.Meta.ID, time.Now())
			return nil
		}})
		if err != nil {
			stopConsumer()
			return nil, err
		}
		if consuming != nil {
			go func() {
				// nil: the defaults a user gets (credit 100 at one worker,
				// the raw side's too).
				consumed <- consuming.Consume(cctx, q, cons)
			}()
		} else {
			go func() { consumed <- cons.Listen(cctx, rcv) }()
		}
	} else {
		go func() {
			for {
				msg, err := rcv.Receive(cctx, nil)
				if err != nil {
					consumed <- nil
					return
				}
				at := time.Now()
				id, _ := msg.Properties.MessageID.(string)
				seen(id, at)
				if err := rcv.AcceptMessage(context.Background(), msg); err != nil {
					consumed <- err
					return
				}
			}
		}()
	}

	// The raw side sends one prebuilt message, its message-id set per send
	// (go-amqp encodes it during the call).
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "lat-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	rawMsg := *r.rawMsgs[0]
	props := *rawMsg.Properties
	rawMsg.Properties = &props

	waitErr := make(chan error, 1)
	libReceipts := make(chan *artemis.Receipt, 1024)
	rawReceipts := make(chan amqp.SendReceipt, 1024)
	go func() {
		var first error
		if lib {
			for rc := range libReceipts {
				if err := rc.Wait(ctx); err != nil && first == nil {
					first = err
				}
			}
		} else {
			for rc := range rawReceipts {
				if _, err := rc.Wait(ctx); err != nil && first == nil {
					first = err
				}
			}
		}
		waitErr <- first
	}()
	interval := time.Second / time.Duration(r.cfg.latRate)
	t0 := time.Now()
	var sendErr error
	data := r.data
	for i := range n {
		if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		start := time.Now()
		if lib {
			data.OrderID = 100000 + i
			env, err := artemis.NewEnvelope(urn, data, artemis.EnvelopeQueue(q))
			if err != nil {
				sendErr = err
				break
			}
			mu.Lock()
			starts[env.Meta.ID] = start
			mu.Unlock()
			rc, err := pub.PublishWithReceipt(ctx, env)
			if err != nil {
				sendErr = err
				break
			}
			libReceipts <- rc
		} else {
			mu.Lock()
			starts[ids[i]] = start
			mu.Unlock()
			props.MessageID = ids[i]
			rc, err := snd.SendWithReceipt(ctx, &rawMsg, nil)
			if err != nil {
				sendErr = err
				break
			}
			rawReceipts <- rc
		}
	}
	close(libReceipts)
	close(rawReceipts)
	if err := <-waitErr; err != nil && sendErr == nil {
		sendErr = err
	}
	if sendErr != nil {
		stopConsumer()
		return nil, sendErr
	}
	select {
	case <-got:
	case <-ctx.Done():
		stopConsumer()
		return nil, fmt.Errorf("received %d of %d: %w", count.Load(), n, ctx.Err())
	}
	stopConsumer()
	if err := <-consumed; err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, n)
	for id, at := range entries {
		s, ok := starts[id]
		if !ok {
			return nil, fmt.Errorf("received %q, which this segment did not publish", id)
		}
		lat = append(lat, at.Sub(s))
	}
	return lat, nil
}
