package integration_test

// Two instances of a service sharing a backlog, each a Client.Consume with
// the default options: each takes a fair share.

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// TestIntegrationDefaultCreditSharesTheBacklogFairly: a backlog of 3,000
// messages, then two Clients (two instances of one service) consume it
// without WithCredit (the default credit) and eight workers each,
// every handler call taking 10 ms. Each instance handles a fair share:
// within 20 % of half the backlog. The handlers start once both instances
// are attached, so the share measures the credit, not who dialled first.
// The handlers' work makes the run last two to three seconds, so a stall of
// one instance or of the broker of a tenth of a second on a busy machine
// (CI runs other packages beside it) moves the share by a few percent, as
// it would in a service, rather than by the quarter it moved a run with
// 2 ms handlers once; a credit that let one instance hoard the backlog
// would still show in full.
func TestIntegrationDefaultCreditSharesTheBacklogFairly(t *testing.T) {
	const (
		urn     = "urn:babel:fair:work"
		backlog = 3000
		workers = 8
		work    = 10 * time.Millisecond
	)
	ctx, _, q, pub := onBrokerClientPublisher(t)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for n := next.Add(1); n <= backlog; n = next.Add(1) {
				if _, err := pub.Publish(ctx, artemis.Job(urn, map[string]int64{"n": n})); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	b, _, _ := onBroker(t)
	attached := make(chan struct{})
	var attachedN atomic.Int32
	var handled [2]atomic.Int64
	var total atomic.Int64
	all := make(chan struct{})
	for i := range 2 {
		c, err := artemis.Dial(ctx, []string{b.URL}, &artemis.ClientOptions{OnEvent: func(e artemis.ConnectionEvent) {
			if e.Kind == artemis.EventConsumerAttached && attachedN.Add(1) == 2 {
				close(attached)
			}
		}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		cons := testkit.MustConsumer(t, artemis.Handlers{urn: func(hctx context.Context, _ *artemis.Envelope, _ *amqp.Message) error {
			select {
			case <-attached:
			case <-hctx.Done():
				return hctx.Err()
			}
			time.Sleep(work) // the handler's work
			handled[i].Add(1)
			if total.Add(1) == backlog {
				close(all)
			}
			return nil
		}}, artemis.WithConcurrency(workers))
		stop := testkit.ConsumeInBackground(t, c, q, cons, arrival)
		defer stop()
	}
	select {
	case <-all:
	case <-time.After(2 * arrival):
		t.Fatalf("%d of %d handled within %v", total.Load(), backlog, 2*arrival)
	}
	a, c := handled[0].Load(), handled[1].Load()
	fair := float64(backlog) / 2
	skew := math.Max(math.Abs(float64(a)-fair), math.Abs(float64(c)-fair)) / fair
	fmt.Printf("fairness: default credit, 2 instances x %d workers, backlog %d: %d and %d handled (%.1f %% off an even share)\n",
		workers, backlog, a, c, 100*skew)
	assert.Equal(t, int64(backlog), a+c, "each message handled once")
	assert.LessOrEqual(t, skew, 0.2, "each instance handles within 20 %% of half the backlog: %d and %d", a, c)
}
