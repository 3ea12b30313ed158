package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// In-process benchmarks: the envelope codec against the JSON floor every
// publisher pays anyway, Consumer.Handle on an allocation-free fake
// receiver, and Publisher.Publish on a sender that accepts at once.
// BENCHMARKS.md says how to run them and what this machine measured.

// Sinks keep the compiler from discarding the work of a benchmark loop.
var (
	benchSinkEnv *Envelope
	benchSinkMap map[string]any
	benchSinkID  string
	benchSinkErr error
)

// --- the codec ---------------------------------------------------------------

// benchPayloads runs op over the order as a publisher's struct and as a map.
func benchPayloads(b *testing.B, op func(data any) error) {
	for _, tc := range []struct {
		name string
		data any
	}{{"struct", benchOrderStruct()}, {"map", benchOrderMap()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := op(tc.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkEnvelopeRoundTrip(b *testing.B) {
	benchPayloads(b, func(data any) (err error) {
		benchSinkEnv, err = benchRoundTrip(data)
		return err
	})
}

func BenchmarkFloorJSON(b *testing.B) {
	benchPayloads(b, func(data any) (err error) {
		benchSinkMap, err = benchFloorJSON(data)
		return err
	})
}

func BenchmarkDecodeValidate(b *testing.B) {
	body := benchBody(b)
	b.SetBytes(int64(len(body)))
	benchDecodeLoop(b, body, benchDecodeValidate)
}

// benchDecodeLoop reports allocations and decodes body with decode in the
// benchmark's loop, keeping each envelope in benchSinkEnv.
func benchDecodeLoop(b *testing.B, body []byte, decode func([]byte) (*Envelope, error)) {
	b.ReportAllocs()
	for b.Loop() {
		env, err := decode(body)
		if err != nil {
			b.Fatal(err)
		}
		benchSinkEnv = env
	}
}

// --- the consumer's hot path -------------------------------------------------

// benchHandleLoop hands c the benchmark's delivery until b.Loop ends and
// returns the receiver that counted the settlements and how many it handled.
func benchHandleLoop(b *testing.B, c *Consumer) (*fakelink.Receiver, int) {
	msg := benchDelivery(b, benchURN)
	r := fakelink.NewCountingReceiver()
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := c.Handle(ctx, r, msg); err != nil {
			b.Fatal(err)
		}
		n++
	}
	return r, n
}

func BenchmarkHandleRouted(b *testing.B) {
	r, n := benchHandleLoop(b, mustConsumer(b, Handlers{benchURN: benchAcceptOrder}))
	if r.Counted().Accepted != n || r.Counted().Total() != n {
		b.Fatalf("%d deliveries: %d accepted, %d settled", n, r.Counted().Accepted, r.Counted().Total())
	}
}

func BenchmarkHandleUnknownURN(b *testing.B) {
	for _, tc := range []struct {
		strategy UnknownURNStrategy
		settled  func(r *fakelink.Receiver) int
	}{
		{UnknownURNFail, func(r *fakelink.Receiver) int { return r.Counted().Failed }},
		{UnknownURNRelease, func(r *fakelink.Receiver) int { return r.Counted().Failed }},
		{UnknownURNDelete, func(r *fakelink.Receiver) int { return r.Counted().Accepted }},
	} {
		b.Run(string(tc.strategy), func(b *testing.B) {
			reports := 0
			c := mustConsumer(b, Handlers{benchURN: benchAcceptOrder}, WithUnknownURN(tc.strategy),
				WithOnError(func(context.Context, error, *Envelope, *amqp.Message) { reports++ }))
			msg := benchDelivery(b, benchUnknown)
			msg.Value = benchPoisonBody
			r := fakelink.NewCountingReceiver()
			ctx := context.Background()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				benchSinkErr = c.Handle(ctx, r, msg)
				n++
			}
			if tc.settled(r) != n || r.Counted().Total() != n {
				b.Fatalf("%d deliveries: %d settled as %s wants, %d in all", n, tc.settled(r), tc.strategy, r.Counted().Total())
			}
			if wantReports := map[bool]int{true: n, false: 0}[tc.strategy == UnknownURNFail]; reports != wantReports {
				b.Fatalf("%d reports for %d deliveries under %s", reports, n, tc.strategy)
			}
		})
	}
}

// benchSameOrder fails a round trip that did not give back the order it
// started from.
func benchSameOrder(got, want benchOrder) error {
	if got != want {
		return fmt.Errorf("round trip gave %+v, want %+v", got, want)
	}
	return nil
}

// --- the publisher -----------------------------------------------------------

func BenchmarkPublish(b *testing.B) {
	s := &fakelink.Sender{Discard: true}
	n := benchPublishLoop(b, NewPublisher(s, benchQueue))
	if s.Count() != n {
		b.Fatalf("%d publishes, %d sends", n, s.Count())
	}
}

// benchPublishLoop publishes the benchmark order through p until b.Loop
// ends and returns how many it published.
func benchPublishLoop(b *testing.B, p *Publisher) int {
	ctx := context.Background()
	data := benchOrderStruct()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		id, err := p.Publish(ctx, Job(benchURN, data))
		if err != nil {
			b.Fatal(err)
		}
		benchSinkID = id
		n++
	}
	return n
}

func BenchmarkFloorMessage(b *testing.B) {
	s := &fakelink.Sender{Discard: true}
	body := string(benchBody(b))
	created := time.UnixMilli(1749132727000).UTC()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := benchFloorPublish(ctx, s, body, benchMessageID, created); err != nil {
			b.Fatal(err)
		}
	}
}

// --- ratios, measured in one run ---------------------------------------------

// benchPair times subject against floor in the same benchmark, in
// alternating blocks of a few dozen operations, so both see the same machine
// load. On a shared machine a block is now and then stretched by another
// process; the medians of the per-block times leave those blocks out. It
// reports each side's median ns/op and their ratio, subject/floor, as
// x-floor. The benchmark's own ns/op is that of one subject plus one floor.
func benchPair(b *testing.B, floor, subject func() error) {
	const block = 32
	var floorTimes, subjectTimes []float64 // ns/op of each full block
	b.ReportAllocs()
	b.ResetTimer()
	for done, turn := 0, 0; done < b.N; turn++ {
		n := min(block, b.N-done)
		first, second := floor, subject
		if turn%2 == 1 {
			first, second = subject, floor
		}
		t0 := time.Now()
		for range n {
			if err := first(); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		for range n {
			if err := second(); err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		if n == block || done == 0 {
			a, c := float64(t1.Sub(t0))/float64(n), float64(t2.Sub(t1))/float64(n)
			if turn%2 == 1 {
				a, c = c, a
			}
			floorTimes, subjectTimes = append(floorTimes, a), append(subjectTimes, c)
		}
		done += n
	}
	b.StopTimer()
	f, sub := median(floorTimes), median(subjectTimes)
	b.ReportMetric(sub/f, "x-floor")
	b.ReportMetric(sub, "subject-ns/op")
	b.ReportMetric(f, "floor-ns/op")
}

func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// BenchmarkRatios reports each subject's time as a multiple of its floor
// (x-floor), both measured in the same process. Its ns/op and allocs/op are
// those of one subject and one floor together.
func BenchmarkRatios(b *testing.B) {
	for _, tc := range []struct {
		name string
		data any
	}{
		{"roundtrip-struct", benchOrderStruct()}, {"roundtrip-map", benchOrderMap()},
		{"roundtrip-struct-1k", benchOrderStruct1K()}, {"roundtrip-map-1k", benchOrderMap1K()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			benchPair(b,
				func() error {
					m, err := benchFloorJSON(tc.data)
					benchSinkMap = m
					return err
				},
				func() error {
					env, err := benchRoundTrip(tc.data)
					benchSinkEnv = env
					return err
				})
		})
	}
	// The round trip as a program that shares a struct meets it: build,
	// encode, decode and Bind into the struct, against encoding/json of
	// the same struct both ways.
	for _, tc := range []struct {
		name string
		data benchOrder
	}{{"roundtrip-bind-struct", benchOrderStruct()}, {"roundtrip-bind-struct-1k", benchOrderStruct1K()}} {
		b.Run(tc.name, func(b *testing.B) {
			benchPair(b,
				func() error {
					body, err := json.Marshal(tc.data)
					if err != nil {
						return err
					}
					var got benchOrder
					if err := json.Unmarshal(body, &got); err != nil {
						return err
					}
					return benchSameOrder(got, tc.data)
				},
				func() error {
					env, err := benchRoundTrip(tc.data)
					if err != nil {
						return err
					}
					var got benchOrder
					if err := env.Bind(&got); err != nil {
						return err
					}
					return benchSameOrder(got, tc.data)
				})
		})
	}
	// Bind alone: data into the struct, against json.Unmarshal of the
	// same bytes.
	for _, tc := range []struct {
		name string
		data benchOrder
	}{{"bind-struct", benchOrderStruct()}, {"bind-struct-1k", benchOrderStruct1K()}} {
		b.Run(tc.name, func(b *testing.B) {
			env, err := benchRoundTrip(tc.data)
			if err != nil {
				b.Fatal(err)
			}
			benchPair(b,
				func() error {
					var got benchOrder
					if err := json.Unmarshal(env.Data, &got); err != nil {
						return err
					}
					return benchSameOrder(got, tc.data)
				},
				func() error {
					var got benchOrder
					if err := env.Bind(&got); err != nil {
						return err
					}
					return benchSameOrder(got, tc.data)
				})
		})
	}
	b.Run("decode-validate", func(b *testing.B) {
		body := benchBody(b)
		benchPair(b,
			func() error {
				var m map[string]any
				err := json.Unmarshal(body, &m)
				benchSinkMap = m
				return err
			},
			func() error {
				env, err := benchDecodeValidate(body)
				benchSinkEnv = env
				return err
			})
	})
	b.Run("publish", func(b *testing.B) {
		s := &fakelink.Sender{Discard: true}
		p := NewPublisher(s, benchQueue)
		ctx := context.Background()
		data := benchOrderStruct()
		body := string(benchBody(b))
		created := time.UnixMilli(1749132727000).UTC()
		benchPair(b,
			func() error {
				return benchFloorPublish(ctx, s, body, benchMessageID, created)
			},
			func() error {
				id, err := p.Publish(ctx, Job(benchURN, data))
				benchSinkID = id
				return err
			})
	})
	b.Run("client-publish", func(b *testing.B) {
		// The Client's reconnecting publisher against the Publisher, both
		// over a link that accepts at once and keeps nothing.
		ctx := context.Background()
		bc, err := newClient([]string{"amqp://bench:5672"}, nil, benchDial)
		if err != nil {
			b.Fatal(err)
		}
		c := clientOver(bc)
		defer c.Close(context.Background())
		cp, err := c.Publisher(ctx, benchQueue)
		if err != nil {
			b.Fatal(err)
		}
		p := NewPublisher(&fakelink.Sender{Discard: true}, benchQueue)
		data := benchOrderStruct()
		benchPair(b,
			func() error {
				id, err := p.Publish(ctx, Job(benchURN, data))
				benchSinkID = id
				return err
			},
			func() error {
				id, err := cp.Publish(ctx, Job(benchURN, data))
				benchSinkID = id
				return err
			})
	})
}

// benchDial connects the Client of the client-publish ratio to a broker
// that accepts every transfer at once.
func benchDial(context.Context, *broker) (amqpConn, error) { return benchConn{}, nil }

type benchConn struct{}

func (benchConn) NewSession(context.Context, *amqp.SessionOptions) (amqpSession, error) {
	return benchConn{}, nil
}

func (benchConn) NewSender(context.Context, string, *amqp.SenderOptions) (linkSender, error) {
	return &fakelink.Sender{Discard: true}, nil
}

func (benchConn) NewReceiver(context.Context, string, *amqp.ReceiverOptions) (linkReceiver, error) {
	return nil, errors.New("benchConn: no receiver")
}

func (benchConn) Done() <-chan struct{} { return nil }
func (benchConn) Err() error            { return nil }
func (benchConn) Close() error          { return nil }

// --- the fixtures measure what they claim to ---------------------------------

// --- the fast decode path agrees with the checked one ------------------------

// Decode first tries one pass that checks JSON and UTF-8 while it walks the
// members (decodeFast), and falls back to the path that runs utf8.ValidString
// and json.Valid over the whole body first (decodeChecked). These tests hold
// the fast path to the checked one: it must never take a body the checked
// path refuses, nor decode one differently.

// The codec's own costs: Decode and the re-encode of a decoded envelope, for
// a canonical body (what every SDK writes) and a pretty-printed one (a
// hand-written producer), so the price of canonical re-encoding is visible.
var codecBenchBodies = []struct{ name, body string }{
	{"canonical", `{"job":"urn:babel:orders:created","trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b","data":{"order_id":1042,"amount":99.9,"currency":"USD","note":"café ☕","lines":[{"sku":"A-1","qty":2},{"sku":"B-2","qty":1}]},"meta":{"id":"f1e2d3c4-b5a6-4789-90ab-cdef01234567","queue":"orders","lang":"php","schema_version":1,"created_at":1749132727000,"host":"w1"},"attempts":0,"x_custom":{"a":[1,2]}}`},
	{"pretty", `{
  "job": "urn:babel:orders:created",
  "trace_id": "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
  "data": {
    "order_id": 1042,
    "amount": 99.9,
    "currency": "USD",
    "note": "caf\u00e9 \u2615",
    "lines": [
      {"sku": "A-1", "qty": 2},
      {"sku": "B\/2", "qty": 1}
    ]
  },
  "meta": {
    "id": "f1e2d3c4-b5a6-4789-90ab-cdef01234567",
    "queue": "orders",
    "lang": "php",
    "schema_version": 1,
    "created_at": 1749132727000,
    "host": "w1"
  },
  "attempts": 0,
  "x_custom": { "a": [ 1, 2 ] }
}`},
}

func BenchmarkDecodeBody(b *testing.B) {
	for _, tc := range codecBenchBodies {
		b.Run(tc.name, func(b *testing.B) {
			benchDecodeLoop(b, []byte(tc.body), Decode)
		})
	}
}

func BenchmarkEncodeDecoded(b *testing.B) {
	for _, tc := range codecBenchBodies {
		b.Run(tc.name, func(b *testing.B) {
			env, err := Decode([]byte(tc.body))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				out, err := env.Encode()
				if err != nil {
					b.Fatal(err)
				}
				benchSinkID = string(out[:1])
			}
		})
	}
}

// In-process benchmarks of Consumer.Listen's dispatch: one Listen over a
// fakelink.CreditReceiver, which hands out b.N deliveries on a fixed
// credit, as go-amqp does (a delivery holds a unit of credit until it is
// settled). The sub-benchmark names compare with benchstat: c=8/ungrouped
// against c=8/groups=64 is the grouped-consume ratio of issue 12.

// benchRing is n order deliveries; with groups > 0, delivery i is in group
// i % groups.
func benchRing(b *testing.B, n, groups int) []*amqp.Message {
	ring := make([]*amqp.Message, n)
	for i := range ring {
		m := benchDelivery(b, benchURN)
		if groups > 0 {
			if m.Properties == nil {
				m.Properties = &amqp.MessageProperties{}
			}
			g := fmt.Sprintf("customer-%d", i%groups)
			m.Properties.GroupID = &g
		}
		ring[i] = m
	}
	return ring
}

func BenchmarkListen(b *testing.B) {
	const credit = 100
	for _, tc := range []struct {
		concurrency, groups int
	}{
		{1, 0},
		{8, 0},
		{8, 64},
	} {
		name := fmt.Sprintf("c=%d/ungrouped", tc.concurrency)
		if tc.groups > 0 {
			name = fmt.Sprintf("c=%d/groups=%d", tc.concurrency, tc.groups)
		}
		b.Run(name, func(b *testing.B) {
			ring := benchRing(b, 1024, tc.groups)
			c := mustConsumer(b, Handlers{benchURN: benchAcceptOrder}, WithConcurrency(tc.concurrency))
			r := fakelink.NewCreditReceiver(ring, credit, b.N)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			go func() { errc <- c.Listen(ctx, r) }()
			<-r.Done()
			b.StopTimer()
			cpu := processCPU() - cpu0
			cancel()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			// CPU time per message: on a machine shared with other work,
			// steadier than the wall clock.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
		})
	}
}

// processCPU is the user and system CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchObserver is what a metrics Observer does per event: a few atomic
// counters and a latency sum, no allocation, no lock.
type benchObserver struct {
	byDisposition [DispositionDeadLettered + 2]atomic.Int64
	failed        atomic.Int64
	latency       atomic.Int64
	handler       atomic.Int64
	published     atomic.Int64
	accepted      atomic.Int64
	publishTime   atomic.Int64
}

func (o *benchObserver) Settled(ev SettleEvent) {
	o.byDisposition[ev.Disposition].Add(1)
	if ev.Kind != KindNone {
		o.failed.Add(1)
	}
	o.latency.Add(int64(ev.Latency))
	o.handler.Add(int64(ev.Handler))
}

func (o *benchObserver) Published(ev PublishEvent) {
	o.published.Add(1)
	if ev.Outcome == PublishAccepted {
		o.accepted.Add(1)
	}
	o.publishTime.Add(int64(ev.Duration))
}

// BenchmarkHandleRoutedObserved is BenchmarkHandleRouted with an Observer
// set: compare the two, or read BenchmarkObserverOverhead's ratio.
func BenchmarkHandleRoutedObserved(b *testing.B) {
	obs := &benchObserver{}
	r, n := benchHandleLoop(b, mustConsumer(b, Handlers{benchURN: benchAcceptOrder}, WithObserver(obs)))
	if got := obs.byDisposition[DispositionAccepted].Load(); got != int64(n) || r.Counted().Accepted != n {
		b.Fatalf("%d deliveries: %d observed accepted, %d accepted", n, got, r.Counted().Accepted)
	}
}

// BenchmarkPublishObserved is BenchmarkPublish with an Observer set.
func BenchmarkPublishObserved(b *testing.B) {
	obs := &benchObserver{}
	s := &fakelink.Sender{Discard: true}
	n := benchPublishLoop(b, NewPublisher(s, benchQueue, WithObserver(obs)))
	if obs.accepted.Load() != int64(n) || s.Count() != n {
		b.Fatalf("%d publishes: %d observed accepted, %d sends", n, obs.accepted.Load(), s.Count())
	}
}

// nopObserver does nothing: what the library's side of a hook costs.
type nopObserver struct{}

func (nopObserver) Settled(SettleEvent)    {}
func (nopObserver) Published(PublishEvent) {}

// BenchmarkObserverOverhead times each path with an Observer (the subject)
// against the same path without one (the floor), in one run: x-floor is
// the cost of leaving the hooks on, as a ratio. "nop" is the library's
// side alone (the clock reads, the event, the recover); the others add a
// counting Observer's own atomic adds.
func BenchmarkObserverOverhead(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		obs  Observer
	}{{"handle-nop", nopObserver{}}, {"handle", &benchObserver{}}} {
		b.Run(tc.name, func(b *testing.B) {
			plain := mustConsumer(b, Handlers{benchURN: benchAcceptOrder})
			observed := mustConsumer(b, Handlers{benchURN: benchAcceptOrder}, WithObserver(tc.obs))
			msg := benchDelivery(b, benchURN)
			r := fakelink.NewCountingReceiver()
			benchPair(b,
				func() error { return plain.Handle(ctx, r, msg) },
				func() error { return observed.Handle(ctx, r, msg) })
			if obs, ok := tc.obs.(*benchObserver); ok && obs.byDisposition[DispositionAccepted].Load() == 0 {
				b.Fatal("the observer heard nothing")
			}
		})
	}
	b.Run("publish", func(b *testing.B) {
		obs := &benchObserver{}
		s := &fakelink.Sender{Discard: true}
		plain := NewPublisher(s, benchQueue)
		observed := NewPublisher(s, benchQueue, WithObserver(obs))
		data := benchOrderStruct()
		benchPair(b,
			func() error {
				id, err := plain.Publish(ctx, Job(benchURN, data))
				benchSinkID = id
				return err
			},
			func() error {
				id, err := observed.Publish(ctx, Job(benchURN, data))
				benchSinkID = id
				return err
			})
		if obs.accepted.Load() == 0 {
			b.Fatal("the observer heard nothing")
		}
	})
}
