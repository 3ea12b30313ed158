package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/faultproxy"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// TestFaultCutsWithLatency: one Client (default options) through a fault
// proxy that adds 20 ms each way and cuts every connection with an RST
// after a random 20 to 300 KB. It consumes 5,000 messages (4 handlers) and
// publishes 2,000 (8 goroutines, duplicate detection, a failed publish
// sent again with the same envelope) at once. Every message must be
// handled within the deadline, every publish acknowledged and stored once.
//
// The cuts happen inside the proxy, so the bound on handler duplicates is
// taken where the Client sees each loss (EventDisconnected): the
// deliveries in a handler then, plus the consume window per cut
// (faultConsumeWindow: the credit's deliveries, which the broker may have
// sent within one round trip and whose accepts the cut may swallow before
// the loss is seen, and one in each handler).
func TestFaultCutsWithLatency(t *testing.T) {
	const (
		consumes    = 5000
		publishes   = 2000
		concurrency = 4
		deadline    = 90 * time.Second
	)
	r := faultStart(t, faultSetup{
		timeout: 5 * time.Minute, pubQueue: "cut-pub", conQueue: "cut-con",
		publishes: publishes, consumes: consumes, concurrency: concurrency,
		seeds: []uint64{505},
		prepare: func(proxies []*faultproxy.Proxy) {
			proxies[0].Latency(20 * time.Millisecond)
			require.NoError(t, proxies[0].CutAfter(20<<10, 300<<10))
		},
		onEvent: func(ev artemis.ConnectionEvent, l *ledger.Ledger) {
			if ev.Kind == artemis.EventDisconnected {
				l.Cut(faultConsumeWindow(concurrency))
			}
		},
	})
	l, p := r.l, r.proxies[0]

	start := time.Now()
	dctx, dcancel := context.WithTimeout(r.ctx, deadline)
	defer dcancel()
	r.start(dctx)
	pubTook := make(chan time.Duration, 1)
	go func() { <-r.pubDone; pubTook <- time.Since(start) }()
	var handledBy time.Duration
	select {
	case <-l.HandledAtLeast(consumes):
		handledBy = time.Since(start)
	case <-dctx.Done():
	}
	handledAtDeadline := l.Handled()
	published := <-pubTook
	var stats faultproxy.Stats
	r.stop(func() {
		stats = p.Stats()
		// Stop cutting before the final drains (they go straight to the
		// broker anyway) and close the publisher cleanly.
		require.NoError(t, p.CutAfter(0, 0))
	})

	handled := "not by the deadline"
	if handledBy > 0 {
		handled = fmt.Sprintf("in %.1f s", handledBy.Seconds())
	}
	f := faultReport(t, l, "cuts after 20-300 KB with 20 ms latency",
		fmt.Sprintf("%d of %d handled by the %v deadline (%s)", handledAtDeadline, consumes, deadline, handled),
		fmt.Sprintf("publishes done in %.1f s", published.Seconds()),
		fmt.Sprintf("connections cut %d (accepted %d)", stats.Cuts, stats.Accepted), r.st.String(),
		fmt.Sprintf("events %s", r.events.summary(0)))
	assert.Equal(t, consumes, handledAtDeadline, "every message handled by the deadline")
	assert.Equal(t, consumes+publishes, f.Acked, "every publish acknowledged (and the fill)")
	assert.Positive(t, stats.Cuts, "the proxy cut connections")
}
