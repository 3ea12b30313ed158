package artemis

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// benchObserver is what a metrics Observer does per event: a few atomic
// counters and a latency sum, no allocation, no lock.
type benchObserver struct {
	byDisposition [DeadLettered + 2]atomic.Int64
	failed        atomic.Int64
	latency       atomic.Int64
	handler       atomic.Int64
	published     atomic.Int64
	accepted      atomic.Int64
	publishTime   atomic.Int64
}

func (o *benchObserver) Settled(ev SettleEvent) {
	o.byDisposition[ev.Disposition].Add(1)
	if ev.Kind != nil {
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
	c := mustConsumer(b, Handlers{benchURN: benchAcceptOrder}, WithObserver(obs))
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
	if got := obs.byDisposition[Accepted].Load(); got != int64(n) || r.Counted().Accepted != n {
		b.Fatalf("%d deliveries: %d observed accepted, %d accepted", n, got, r.Counted().Accepted)
	}
}

// BenchmarkPublishObserved is BenchmarkPublish with an Observer set.
func BenchmarkPublishObserved(b *testing.B) {
	obs := &benchObserver{}
	s := &fakelink.Sender{Discard: true}
	p := NewPublisher(s, benchQueue, WithPublishObserver(obs))
	ctx := context.Background()
	data := benchOrderStruct()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		id, err := p.Publish(ctx, benchURN, data)
		if err != nil {
			b.Fatal(err)
		}
		benchSinkID = id
		n++
	}
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
			if obs, ok := tc.obs.(*benchObserver); ok && obs.byDisposition[Accepted].Load() == 0 {
				b.Fatal("the observer heard nothing")
			}
		})
	}
	b.Run("publish", func(b *testing.B) {
		obs := &benchObserver{}
		s := &fakelink.Sender{Discard: true}
		plain := NewPublisher(s, benchQueue)
		observed := NewPublisher(s, benchQueue, WithPublishObserver(obs))
		data := benchOrderStruct()
		benchPair(b,
			func() error {
				id, err := plain.Publish(ctx, benchURN, data)
				benchSinkID = id
				return err
			},
			func() error {
				id, err := observed.Publish(ctx, benchURN, data)
				benchSinkID = id
				return err
			})
		if obs.accepted.Load() == 0 {
			b.Fatal("the observer heard nothing")
		}
	})
}
