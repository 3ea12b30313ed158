package integration_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// TestIntegrationBlackholedFirstURLHandsOverToTheSecond: the Client is
// dialled through a fault proxy first and straight to the broker second,
// with default options. The proxy then black-holes (no FIN, no RST, no
// byte): publishing and consuming resume on the second URL within 20 s.
func TestIntegrationBlackholedFirstURLHandsOverToTheSecond(t *testing.T) {
	b := brokertest.Require(t)
	proxy, first := testkit.FaultProxy(t, b, 1) // 1: faultproxy's default seed (this test makes no cuts)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var (
		evMu sync.Mutex
		evs  []string
	)
	c, err := artemis.Dial(ctx, []string{first, b.URL}, &artemis.ClientOptions{
		OnEvent: func(ev artemis.ConnectionEvent) {
			evMu.Lock()
			evs = append(evs, ev.Kind.String()+" "+ev.URL)
			evMu.Unlock()
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	q := brokertest.Queue(t)
	pub, err := c.Publisher(ctx, q, artemis.WithDuplicateDetection())
	require.NoError(t, err)

	var (
		mu      sync.Mutex
		handled = map[string]time.Time{}
	)
	cons := testkit.MustConsumer(t, artemis.Handlers{"urn:babel:bh:tick": func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		mu.Lock()
		if _, ok := handled[env.Meta.ID]; !ok {
			handled[env.Meta.ID] = time.Now()
		}
		mu.Unlock()
		return nil
	}})
	cctx, ccancel := context.WithCancel(ctx)
	consumed := make(chan error, 1)
	go func() { consumed <- c.Consume(cctx, q, cons) }()
	defer func() {
		ccancel()
		assert.NoError(t, <-consumed)
	}()

	for range 20 {
		_, err := pub.Publish(ctx, artemis.Job("urn:babel:bh:tick", map[string]int{"n": 1}))
		require.NoError(t, err)
	}

	const workers = 4
	var (
		stop     = make(chan struct{})
		okAfter  atomic.Int64
		firstOK  atomic.Int64 // unix nanos of the first publish accepted after the black hole
		timeouts atomic.Int64
		acked    sync.Map // meta.id -> accepted at
	)
	holeAt := time.Now()
	proxy.Blackhole()
	wait := testkit.PublishUntil(ctx, pub, workers, stop, 5*time.Second, "urn:babel:bh:tick", map[string]int{"n": 2}, func(id string, err error, _ time.Duration) {
		switch {
		case err == nil:
			acked.Store(id, time.Now())
			okAfter.Add(1)
			firstOK.CompareAndSwap(0, time.Now().UnixNano())
		case errors.Is(err, context.DeadlineExceeded):
			timeouts.Add(1)
		default:
			t.Logf("publish: %v", err)
		}
	})
	resumed := func() bool {
		if okAfter.Load() < 50 {
			return false
		}
		takeover := time.Unix(0, firstOK.Load())
		back := false
		mu.Lock()
		defer mu.Unlock()
		acked.Range(func(k, v any) bool {
			if _, ok := handled[k.(string)]; ok && !v.(time.Time).Before(takeover) {
				back = true
				return false
			}
			return true
		})
		return back
	}
	require.Eventually(t, resumed, 60*time.Second, 10*time.Millisecond, "publishing and consuming resume on the second URL")
	close(stop)
	wait()
	pubBack := time.Unix(0, firstOK.Load()).Sub(holeAt)
	// Consuming resumed when the first message published on the second URL
	// was handled.
	takeover := time.Unix(0, firstOK.Load())
	var consBack time.Duration
	mu.Lock()
	acked.Range(func(k, v any) bool {
		if v.(time.Time).Before(takeover) {
			return true
		}
		if at, ok := handled[k.(string)]; ok && (consBack == 0 || at.Sub(holeAt) < consBack) {
			consBack = at.Sub(holeAt)
		}
		return true
	})
	mu.Unlock()
	evMu.Lock()
	t.Logf("FIGURES blackhole: publishing resumed %v and consuming %v after the first URL was black-holed (default options: idle timeout %v, %d outcome timeouts); publish timeouts meanwhile %d; events %v",
		pubBack.Round(time.Millisecond), consBack.Round(time.Millisecond), artemis.DefaultIdleTimeout, artemis.DefaultOutcomeTimeouts, timeouts.Load(), evs)
	evMu.Unlock()
	assert.Less(t, pubBack, 20*time.Second)
	assert.Less(t, consBack, 20*time.Second)
	// Every publish acknowledged after the black hole is handled. Those the
	// broker had already pushed to the old consumer (bytes held by the black
	// hole) come back only once the broker gives up on that connection.
	missing := func() int {
		n := 0
		acked.Range(func(k, _ any) bool {
			mu.Lock()
			_, ok := handled[k.(string)]
			mu.Unlock()
			if !ok {
				n++
			}
			return true
		})
		return n
	}
	stragglers := missing()
	require.Eventually(t, func() bool { return missing() == 0 }, 150*time.Second, 50*time.Millisecond, "every acknowledged publish is handled")
	allBack := time.Since(holeAt)
	t.Logf("FIGURES blackhole: %d acknowledged publishes after the black hole, %d of them not handled when consuming resumed (pushed into the black hole); all handled %v after it",
		okAfter.Load(), stragglers, allBack.Round(time.Millisecond))
}
