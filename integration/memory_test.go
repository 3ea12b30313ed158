package integration_test

// A Client consumer of large messages with the default options holds what
// the byte budget allows, not the count credit's worth.

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// TestIntegrationLargeMessagesStayWithinTheByteBudget: 80 messages of
// 1 MiB wait on a queue; a Client consumes them with the default options
// (credit 100) and two slow workers. With the count credit alone the
// broker pushes all 80 at once (80 MiB in the process); under the byte
// budget (DefaultCreditBytes, 32 MiB) it pushes about 32. The heap's peak
// growth while consuming tells which.
func TestIntegrationLargeMessagesStayWithinTheByteBudget(t *testing.T) {
	const (
		urn  = "urn:babel:memory:blob"
		n    = 80
		size = 1 << 20
	)
	ctx, _, q, pub := onBrokerClientPublisher(t)
	func() { // the blob is garbage once published, before the heap is measured
		blob := strings.Repeat("x", size)
		for i := range n {
			_, err := pub.Publish(ctx, artemis.Job(urn, map[string]any{"n": i, "blob": blob}))
			require.NoError(t, err)
		}
	}()

	b, _, _ := onBroker(t)
	c, err := artemis.Dial(ctx, []string{b.URL}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })

	var handled atomic.Int64
	all := make(chan struct{})
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		time.Sleep(50 * time.Millisecond)
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}}, artemis.WithConcurrency(2))

	// A tight GC target, so the heap follows what is live (the deliveries
	// held) rather than the garbage between collections.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	sampling := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var m runtime.MemStats
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampling:
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		}
	}()
	stop := testkit.ConsumeInBackground(t, c, q, cons, arrival)
	select {
	case <-all:
	case <-time.After(arrival):
		t.Fatalf("%d of %d handled within %v", handled.Load(), n, arrival)
	}
	close(sampling)
	<-done
	stop()
	growth := float64(peak.Load()-min(base, peak.Load())) / (1 << 20)
	fmt.Printf("memory: %d messages of 1 MiB, default credit %d, byte budget %d MiB, 2 workers: heap peak %.0f MiB above the start (the count credit alone would prefetch all %d)\n",
		n, artemis.MinCredit, artemis.DefaultCreditBytes>>20, growth, n)
	assert.Less(t, growth, float64(52), "the prefetch stays near the byte budget, not the count credit's worth")
}
