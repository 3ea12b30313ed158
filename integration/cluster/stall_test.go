package cluster_test

import (
	"context"
	"sort"
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

// Member 1 is reached through a fault proxy that stalls (a half-open
// network: no byte carried, nothing closed) while 30 unkeyed messages are
// published with receipts, round robin over the three members: the 20
// receipts of members 2 and 3 resolve within a bound well under the stall,
// the 10 of member 1 only once the proxy heals, and every message is
// stored once (10 on each member) and handled once.
//
// The stall (8 s) stays under the connection's idle timeout (set to a
// minute here; the default 10 s would drop member 1's connection during the
// stall, and its receipts would resolve as unknown: a lost member, not a
// stalled one) and under the receipts' own deadline (twice DialTimeout).
func TestClusterReceiptsOfHealthyMembersDoNotWaitForAStalledOne(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const (
		n     = 30
		stall = 8 * time.Second
		bound = 3 * time.Second // for the healthy members' receipts
	)
	proxy, through := testkit.FaultProxy(t, cl.Nodes[0], 1) // 1: faultproxy's default seed (no cuts here)
	members := cl.Members()
	members[0] = []string{through}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := artemis.DialCluster(ctx, members, &artemis.ClientOptions{
		Logger:      quiet,
		ConnOptions: &amqp.ConnOptions{IdleTimeout: time.Minute},
		DialTimeout: 15 * time.Second, // receipts' deadline 30 s, past the stall
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.True(t, c.Status().Members[0].Connected, "member 1 is connected through the proxy")
	q := queueName(t, "stall")
	p, err := c.Publisher(ctx, q)
	require.NoError(t, err)

	proxy.Stall()
	stalledAt := time.Now()
	healed := make(chan struct{})
	go func() {
		defer close(healed)
		select {
		case <-time.After(stall):
		case <-ctx.Done():
		}
		proxy.Heal()
	}()
	t.Cleanup(func() { <-healed })

	rs := make([]*artemis.Receipt, n)
	for i := range rs {
		rs[i], err = p.PublishWithReceipt(ctx, artemis.Job(urn, order{Seq: i}))
		require.NoError(t, err)
	}
	written := time.Since(stalledAt)

	// When each receipt resolved, after the stall began.
	took := make([]atomic.Int64, n)
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			select {
			case <-r.Done():
				took[i].Store(int64(time.Since(stalledAt)))
			case <-ctx.Done():
			}
		})
	}
	wg.Wait()
	early := map[int]bool{}
	var slowestEarly, firstLate, lastLate time.Duration
	for i := range rs {
		d := time.Duration(took[i].Load())
		require.NotZero(t, d, "receipt %d never resolved", i)
		if d <= bound {
			early[i] = true
			slowestEarly = max(slowestEarly, d)
			continue
		}
		if firstLate == 0 || d < firstLate {
			firstLate = d
		}
		lastLate = max(lastLate, d)
	}
	acked := map[string]bool{}
	var failed []string
	for _, r := range rs {
		if err := r.Wait(ctx); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		acked[r.ID()] = true
	}
	line("member 1 stalled for %v: %d receipts written in %d ms; %d resolved within %v (the last at %d ms), the other %d from %.1f s to %.1f s (after the heal); %d accepted",
		stall, n, written.Milliseconds(), len(early), bound, slowestEarly.Milliseconds(), n-len(early), firstLate.Seconds(), lastLate.Seconds(), len(acked))
	// Round robin over three members: a third of the messages went to the
	// stalled one, whose receipts cannot resolve before the heal.
	assert.Len(t, early, n-n/3, "the receipts of members 2 and 3 resolve within %v of the stall", bound)
	pendingAt := make([]int, 0, n/3)
	for i := range rs {
		if !early[i] {
			pendingAt = append(pendingAt, i%3)
		}
	}
	sort.Ints(pendingAt)
	if len(pendingAt) > 0 {
		assert.Equal(t, pendingAt[0], pendingAt[len(pendingAt)-1], "the pending receipts are one member's (every third)")
	}
	assert.Empty(t, failed, "every receipt accepted once the stall ended")

	// Stored once: 10 on each member, 30 in all; handled once each.
	per := counts(t, cl, q)
	tl := newTally(len(acked))
	stop := consume(t, c, q, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		tl.add(env.Meta.ID)
		return nil
	})
	tl.wait(t, time.Minute)
	stop()
	lost, extra, dups := tl.figures(acked)
	line("stored %s per member; handled %d: lost %d, unknown ids %d, handled twice %d", joinInts(per), tl.handled(), lost, extra, dups)
	assert.Equal(t, []int{n / 3, n / 3, n / 3}, per, "stored once each, round robin")
	assert.Zero(t, lost)
	assert.Zero(t, extra)
	assert.Zero(t, dups)
}
