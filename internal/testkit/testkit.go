// Package testkit holds the helpers the two broker tiers share: the
// integration tests (integration/) and the fault tests (faults/). Each
// works through the library's exported API only; the broker itself comes
// from internal/brokertest.
package testkit

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/faultproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// MustConsumer is artemis.NewConsumer for a configuration the test knows is valid.
func MustConsumer(t testing.TB, h artemis.Handlers, opts ...artemis.ConsumerOption) *artemis.Consumer {
	t.Helper()
	c, err := artemis.NewConsumer(h, opts...)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	return c
}

// ConsumeInBackground runs c.Consume on q in the background until the
// returned stop is called (or the test ends); stop waits up to wait for
// Consume to return and checks that it returned nil.
func ConsumeInBackground(t *testing.T, c *artemis.Client, q string, cons *artemis.Consumer, wait time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, q, cons) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "Consume's return after its context ended")
			case <-time.After(wait):
				t.Errorf("Consume did not return within %v of its context's end", wait)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// PublishUntil publishes urn with data from workers goroutines through pub
// until stop is closed, each Publish with a context of perCall, and hands
// record every result with how long the call took. The returned wait waits
// for the goroutines (after stop is closed).
func PublishUntil(ctx context.Context, pub *artemis.ClientPublisher, workers int, stop <-chan struct{}, perCall time.Duration,
	urn string, data any, record func(id string, err error, took time.Duration),
) (wait func()) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, cancel := context.WithTimeout(ctx, perCall)
				start := time.Now()
				id, err := pub.Publish(pctx, artemis.Job(urn, data))
				cancel()
				record(id, err, time.Since(start))
			}
		})
	}
	return wg.Wait
}

// FaultProxy starts a fault proxy in front of b's AMQP port (its cuts
// drawn from seed) and returns it with b's URL rewritten to go through it.
// Close runs at the test's end.
func FaultProxy(t *testing.T, b *brokertest.Broker, seed uint64) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	p, err := faultproxy.Start(u.Host, faultproxy.WithSeed(seed))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	through, err := p.Rewrite(b.URL)
	require.NoError(t, err)
	return p, through
}
