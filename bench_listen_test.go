package artemis

// In-process benchmarks of Consumer.Listen's dispatch: one Listen over a
// receiver that hands out b.N deliveries on a fixed credit, as go-amqp
// does (a delivery holds a unit of credit until it is settled). The
// sub-benchmark names compare with benchstat: c=8/ungrouped against
// c=8/groups=64 is the grouped-consume ratio of issue 12.

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

// creditReceiver hands out deliveries from a ring of prepared messages,
// at most credit of them unsettled at once, until limit were handed out.
type creditReceiver struct {
	ring    []*amqp.Message
	credit  chan struct{}
	next    atomic.Int64
	limit   int64
	settled atomic.Int64
	done    chan struct{}
}

func newCreditReceiver(ring []*amqp.Message, credit int, limit int) *creditReceiver {
	r := &creditReceiver{ring: ring, credit: make(chan struct{}, credit), limit: int64(limit), done: make(chan struct{})}
	for range credit {
		r.credit <- struct{}{}
	}
	return r
}

func (r *creditReceiver) Receive(ctx context.Context, _ *amqp.ReceiveOptions) (*amqp.Message, error) {
	select {
	case <-r.credit:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	i := r.next.Add(1) - 1
	if i >= r.limit {
		r.credit <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return r.ring[i%int64(len(r.ring))], nil
}

func (r *creditReceiver) settle() error {
	r.credit <- struct{}{}
	if r.settled.Add(1) == r.limit {
		close(r.done)
	}
	return nil
}

func (r *creditReceiver) AcceptMessage(context.Context, *amqp.Message) error  { return r.settle() }
func (r *creditReceiver) ReleaseMessage(context.Context, *amqp.Message) error { return r.settle() }
func (r *creditReceiver) ModifyMessage(context.Context, *amqp.Message, *amqp.ModifyMessageOptions) error {
	return r.settle()
}

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
			r := newCreditReceiver(ring, credit, b.N)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			go func() { errc <- c.Listen(ctx, r) }()
			<-r.done
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
