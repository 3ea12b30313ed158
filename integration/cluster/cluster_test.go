package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// volume is how many messages the spread test sends (CLUSTER_MESSAGES, default 30000).
func volume(t *testing.T) int {
	if v := os.Getenv("CLUSTER_MESSAGES"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "CLUSTER_MESSAGES")
		return n
	}
	return 30000
}

// Messages published through DialCluster spread over the members, and all
// of them come back through it, each once.
func TestClusterPublishesSpreadAndAllAreConsumedOnce(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	n := volume(t)
	q := queueName(t, "spread")
	c := dialCluster(t, cl, nil)
	p, err := c.Publisher(context.Background(), q)
	require.NoError(t, err)

	start := time.Now()
	acked := publishAll(t, p, n, 500, func(i int) (any, []artemis.PublishOption) { return order{Seq: i}, nil })
	pubTime := time.Since(start)
	require.Len(t, acked, n)

	per := counts(t, cl, q)
	stored := 0
	for _, k := range per {
		stored += k
	}
	mean := float64(n) / float64(len(per))
	worst := 0.0
	for _, k := range per {
		worst = math.Max(worst, math.Abs(float64(k)-mean)/mean)
	}

	tl := newTally(n)
	start = time.Now()
	stop := consume(t, c, q, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		tl.add(env.Meta.ID)
		return nil
	}, artemis.WithConcurrency(8))
	tl.wait(t, 4*time.Minute)
	conTime := time.Since(start)
	time.Sleep(300 * time.Millisecond) // a late duplicate would show now
	stop()
	lost, extra, dups := tl.figures(acked)

	line("spread: %d published in %.1f s (%.0f/s), per member %s (worst %.1f %% off the mean), stored %d (stored twice %d), consumed in %.1f s (%.0f/s): lost %d, unknown ids %d, handled twice %d",
		n, pubTime.Seconds(), float64(n)/pubTime.Seconds(), joinInts(per), 100*worst, stored, stored-n,
		conTime.Seconds(), float64(n)/conTime.Seconds(), lost, extra, dups)
	assert.LessOrEqual(t, worst, 0.20, "every member within 20 %% of the mean: %v", per)
	assert.Equal(t, n, stored, "stored once each")
	assert.Zero(t, lost)
	assert.Zero(t, extra)
	assert.Zero(t, dups)
}

// Messages that another producer left on one member only are all handled
// by the cluster Client, which consumes on every member.
func TestClusterConsumesMessagesStoredOnOneMember(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const n = 300
	q := queueName(t, "onemember")
	last := len(cl.Nodes) - 1
	one := dialNode(t, cl.Nodes[last].URL)
	p, err := one.Publisher(context.Background(), q)
	require.NoError(t, err)
	acked := publishAll(t, p, n, 100, func(i int) (any, []artemis.PublishOption) { return order{Seq: i}, nil })
	require.NoError(t, p.Close(context.Background()))

	c := dialCluster(t, cl, nil)
	tl := newTally(n)
	start := time.Now()
	stop := consume(t, c, q, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		tl.add(env.Meta.ID)
		return nil
	}, artemis.WithConcurrency(4))
	tl.wait(t, time.Minute)
	took := time.Since(start)
	stop()
	lost, extra, dups := tl.figures(acked)
	line("stored on member %d only: %d published there, %d handled through the cluster Client in %.2f s: lost %d, unknown ids %d, handled twice %d",
		last+1, n, tl.handled(), took.Seconds(), lost, extra, dups)
	assert.Zero(t, lost)
	assert.Zero(t, extra)
	assert.Zero(t, dups)
}

// 100 groups interleaved: each group's messages are handled in the order
// they were published, one at a time, at concurrency 8 per member.
func TestClusterKeepsTheOrderOfEachGroup(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const groups, perGroup = 100, 20
	n := groups * perGroup
	q := queueName(t, "groups")
	c := dialCluster(t, cl, nil)
	p, err := c.Publisher(context.Background(), q)
	require.NoError(t, err)
	acked := publishAll(t, p, n, 200, func(i int) (any, []artemis.PublishOption) {
		g := fmt.Sprintf("g%03d", i%groups)
		return order{Group: g, Seq: i / groups}, []artemis.PublishOption{artemis.WithGroupID(g)}
	})

	per := counts(t, cl, q)

	var mu sync.Mutex
	seen := map[string][]int{}
	running := map[string]int{}
	overlaps := 0
	tl := newTally(n)
	stop := consume(t, c, q, func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		o := decode(t, env)
		mu.Lock()
		running[o.Group]++
		if running[o.Group] > 1 {
			overlaps++
		}
		seen[o.Group] = append(seen[o.Group], o.Seq)
		mu.Unlock()
		if o.Seq%5 == 0 {
			time.Sleep(time.Millisecond) // let other groups' handlers overtake
		}
		mu.Lock()
		running[o.Group]--
		mu.Unlock()
		tl.add(env.Meta.ID)
		return nil
	}, artemis.WithConcurrency(8))
	tl.wait(t, 2*time.Minute)
	stop()

	outOfOrder := 0
	mu.Lock()
	for g, seqs := range seen {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				outOfOrder++
				t.Errorf("group %s: %v", g, seqs)
				break
			}
		}
	}
	mu.Unlock()
	lost, extra, dups := tl.figures(acked)
	line("groups: %d groups x %d interleaved, concurrency 8 per member, messages per member %s: groups out of order %d, overlapping handlers in a group %d, lost %d, unknown ids %d, handled twice %d",
		groups, perGroup, joinInts(per), outOfOrder, overlaps, lost, extra, dups)
	assert.Len(t, seen, groups)
	assert.Zero(t, outOfOrder)
	assert.Zero(t, overlaps)
	assert.Zero(t, lost)
	assert.Zero(t, extra)
	assert.Zero(t, dups)
}

// A member SIGKILLed while messages are being published (with duplicate
// detection) and consumed, then restarted: nothing lost, nothing stored
// twice, handler duplicates within the killed member's credit.
func TestClusterSurvivesAKilledMember(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const n, publishers, concurrency = 3000, 4, 8
	credit := max(2*concurrency, artemis.MinCredit) // Consume's default credit at this concurrency
	// What a SIGKILL can bring back to the handlers: the deliveries the
	// killed member held unsettled on the link (at most its credit), plus
	// the accepts already sent for which the link had refilled its credit
	// but that the broker had not yet journaled (at most a credit more).
	bound := 2 * credit
	victim := 2 // 1-based
	qc, qp := queueName(t, "kill.consume"), queueName(t, "kill.publish")
	c := dialCluster(t, cl, nil)

	// The consume stream's messages, spread over the members before the kill.
	pc, err := c.Publisher(context.Background(), qc)
	require.NoError(t, err)
	ackedC := publishAll(t, pc, n, 500, func(i int) (any, []artemis.PublishOption) { return order{Seq: i}, nil })

	tc := newTally(n)
	stopC := consume(t, c, qc, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		time.Sleep(20 * time.Millisecond)
		tc.add(env.Meta.ID)
		return nil
	}, artemis.WithConcurrency(concurrency))

	// The publish stream: duplicate detection pins each message to one member;
	// an unknown outcome is retried with the same envelope, as a user would.
	pp, err := c.Publisher(context.Background(), qp, artemis.WithDuplicateDetection())
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		ackedP   = map[string]bool{}
		retried  int
		pubErrs  []error
		ackCount atomic.Int64
		wg       sync.WaitGroup
	)
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer pcancel()
	for w := range publishers {
		wg.Go(func() {
			for i := range n / publishers {
				env, err := artemis.NewEnvelope(urn, order{Seq: w*n + i})
				if err != nil {
					panic(err)
				}
				for try := 0; ; try++ {
					_, err = pp.Publish(pctx, env)
					if err == nil || !errors.Is(err, artemis.ErrOutcomeUnknown) || try == 5 {
						break
					}
					mu.Lock()
					retried++
					mu.Unlock()
				}
				mu.Lock()
				if err != nil {
					pubErrs = append(pubErrs, err)
				} else {
					ackedP[env.Meta.ID] = true
				}
				mu.Unlock()
				ackCount.Add(1)
			}
		})
	}

	// Kill mid-stream: once both streams are under way.
	require.Eventually(t, func() bool { return tc.handled() >= n/6 && ackCount.Load() >= n/6 }, time.Minute, 10*time.Millisecond)
	handledAtKill, ackedAtKill := tc.handled(), ackCount.Load()
	killedAt := cl.KillNode(t, victim)
	restartTook := cl.RestartNode(t, victim)
	var back time.Duration
	require.Eventually(t, func() bool {
		if c.Status().Members[victim-1].Connected {
			back = time.Since(killedAt)
			return true
		}
		return false
	}, time.Minute, 20*time.Millisecond, "the cluster Client re-dialled the member")
	wg.Wait()
	tc.wait(t, 2*time.Minute)
	time.Sleep(500 * time.Millisecond) // a late duplicate would show now
	stopC()
	require.Empty(t, pubErrs, "publish errors")

	// What the publish stream stored: drain it through the cluster (no
	// fault now, so every stored copy is handled once).
	tp := newTally(len(ackedP))
	stopP := consume(t, c, qp, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		tp.add(env.Meta.ID)
		return nil
	}, artemis.WithConcurrency(8))
	tp.wait(t, time.Minute)
	time.Sleep(500 * time.Millisecond)
	stopP()
	lostP, extraP, storedTwice := tp.figures(ackedP)
	lostC, extraC, dupsC := tc.figures(ackedC)

	line("killed member %d mid-stream (after %d handled, %d published), restarted in %.1f s, member connected again %.1f s after the SIGKILL: publish %d acked (%d retried after an unknown outcome): lost %d, unknown ids %d, stored twice %d; consume %d: lost %d, unknown ids %d, handler duplicates %d (bound %d: twice the credit %d)",
		victim, handledAtKill, ackedAtKill, restartTook.Seconds(), back.Seconds(), len(ackedP), retried, lostP, extraP, storedTwice,
		n, lostC, extraC, dupsC, bound, credit)
	assert.Len(t, ackedP, n)
	assert.Zero(t, lostP)
	assert.Zero(t, extraP)
	assert.Zero(t, storedTwice)
	assert.Zero(t, lostC)
	assert.Zero(t, extraC)
	assert.LessOrEqual(t, dupsC, bound)
}

// A message with a time to live, moved by redistribution to another member,
// expires at its creation + ttl (the absolute expiry time), not ttl after
// the move.
func TestClusterTTLSurvivesRedistribution(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const ttl = 4 * time.Second
	q := queueName(t, "ttl")
	src := dialNode(t, cl.Nodes[0].URL)
	p, err := src.Publisher(context.Background(), q)
	require.NoError(t, err)
	published := time.Now()
	_, err = p.Publish(context.Background(), artemis.Job(urn, order{Seq: 1}), artemis.WithTTL(ttl))
	require.NoError(t, err)

	// No consumer anywhere for a while, then one on node 2 only: the
	// message moves there.
	time.Sleep(2500 * time.Millisecond)
	r := plainReceiver(t, cl.Nodes[1], q, 1)
	var first, last time.Duration
	deliveries := 0
	watchUntil := published.Add(2*ttl + time.Second)
	for time.Now().Before(watchUntil) {
		ctx, cancel := context.WithDeadline(context.Background(), watchUntil)
		m, err := r.Receive(ctx, nil)
		cancel()
		if err != nil {
			break // the watch ended
		}
		at := time.Since(published)
		if deliveries == 0 {
			first = at
		}
		last = at
		deliveries++
		time.Sleep(200 * time.Millisecond)
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, r.ReleaseMessage(rctx, m))
		rcancel()
	}
	// A delivery the broker made just before the expiry may reach us a
	// little later on a loaded machine: a second of slack, well short of
	// the ttl after the move.
	limit := ttl + time.Second
	line("ttl %v, moved by redistribution to member 2 at %.1f s: delivered there %d times, the last at %.1f s (limit %.1f s; a header ttl alone would run to %.1f s)",
		ttl, first.Seconds(), deliveries, last.Seconds(), limit.Seconds(), (first + ttl).Seconds())
	require.Positive(t, deliveries, "the message reached member 2")
	assert.Less(t, last, limit, "expired on time after the move")
}

// A message whose handler always fails reaches the dead-letter queue after
// maxTries deliveries, and the DLQ is read through the cluster Client.
func TestClusterFailingMessageReachesTheDLQWithinTheBound(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const maxTries = 3
	q := queueName(t, "dlq")
	c := dialCluster(t, cl, nil)
	p, err := c.Publisher(context.Background(), q)
	require.NoError(t, err)
	id, err := p.Publish(context.Background(), artemis.Job(urn, order{Seq: 1}))
	require.NoError(t, err)

	var calls atomic.Int32
	start := time.Now()
	stop := consume(t, c, q, func(context.Context, *artemis.Envelope, *amqp.Message) error {
		calls.Add(1)
		return errors.New("always fails")
	}, artemis.WithMaxTries(maxTries), artemis.WithRetrySchedule(nil)) // immediate retries: the broker's count and the Client's memory

	dl := newTally(1)
	var dlAttempts int
	stopDL := consume(t, c, q+".dlq", func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		dlAttempts = env.Attempts
		dl.add(env.Meta.ID)
		return nil
	})
	dl.wait(t, time.Minute)
	took := time.Since(start)
	time.Sleep(time.Second) // a further delivery of the source would show now
	stop()
	stopDL()
	line("failing message: %d handler calls (maxTries %d), on a member's DLQ after %.2f s, read through the cluster Client (attempts %d); same id %t",
		calls.Load(), maxTries, took.Seconds(), dlAttempts, dl.calls[id] == 1)
	assert.EqualValues(t, maxTries, calls.Load())
	assert.Equal(t, 1, dl.calls[id], "the dead-letter record carries the message's meta.id")
}

// A connection router's amqp:connection:redirect is followed.
func TestClusterRedirectIsFollowed(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	if cl.RouterURL == "" {
		t.Fatal("the cluster has no connection router (ARTEMIS_CLUSTER_ROUTER_URL): start it with scripts/artemis cluster-start")
	}
	q := queueName(t, "redirect")
	rc := dialNode(t, cl.RouterURL)
	st := rc.Status()
	ru, err := url.Parse(cl.RouterURL)
	require.NoError(t, err)
	su, err := url.Parse(st.URL)
	require.NoError(t, err)
	p, err := rc.Publisher(context.Background(), q)
	require.NoError(t, err)
	id, err := p.Publish(context.Background(), artemis.Job(urn, order{Seq: 1}))
	require.NoError(t, err)

	c := dialCluster(t, cl, nil)
	tl := newTally(1)
	stop := consume(t, c, q, func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		tl.add(env.Meta.ID)
		return nil
	})
	tl.wait(t, 30*time.Second)
	stop()
	line("redirect: the router at port %s sent the Client to port %s; a message published there was handled through the cluster (%d of 1)",
		ru.Port(), su.Port(), tl.calls[id])
	assert.True(t, st.Connected)
	assert.NotEqual(t, ru.Port(), su.Port(), "connected to the redirect's target, not the router")
	assert.Equal(t, 1, tl.calls[id])
}

// A failing message that another consumer already failed twice on member 1
// (delivery-count 2), then moved by redistribution to the members this
// Client consumes from (the count restarts at 0 there), gets maxTries more
// handler calls and no more: deliveries in all stay within maxTries x (1 +
// moves).
func TestClusterFailingMessageMovedByRedistributionStaysWithinTheBound(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	const maxTries, failedBefore = 3, 2
	q := queueName(t, "dlqmove")
	src := dialNode(t, cl.Nodes[0].URL)
	p, err := src.Publisher(context.Background(), q)
	require.NoError(t, err)
	id, err := p.Publish(context.Background(), artemis.Job(urn, order{Seq: 1}))
	require.NoError(t, err)

	// Another application's consumer on member 1 fails it twice, then goes.
	conn := cl.Nodes[0].Dial(t)
	r := conn.NewReceiver(q, &brokertest.ReceiverOptions{Credit: 1})
	for range failedBefore {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := r.Receive(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, r.ModifyMessage(ctx, m, &amqp.ModifyMessageOptions{DeliveryFailed: true}))
		cancel()
	}
	conn.CloseReceiver(r)

	// A cluster Client on the other members only: the message moves.
	c := dialCluster(t, &brokertest.Cluster{Name: cl.Name, Nodes: cl.Nodes[1:]}, nil)
	var calls atomic.Int32
	var counts []uint32
	var mu sync.Mutex
	stop := consume(t, c, q, func(_ context.Context, _ *artemis.Envelope, m *amqp.Message) error {
		calls.Add(1)
		mu.Lock()
		if m.Header != nil {
			counts = append(counts, m.Header.DeliveryCount)
		}
		mu.Unlock()
		return errors.New("always fails")
	}, artemis.WithMaxTries(maxTries), artemis.WithRetrySchedule(nil)) // immediate retries: the broker's count and the Client's memory
	dl := newTally(1)
	stopDL := consume(t, c, q+".dlq", func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		dl.add(env.Meta.ID)
		return nil
	})
	dl.wait(t, time.Minute)
	time.Sleep(time.Second)
	stop()
	stopDL()
	total := failedBefore + int(calls.Load())
	line("failing message moved once by redistribution: %d deliveries before the move, %d handler calls after it (delivery-counts %v), %d in all, bound maxTries x (1 + moves) = %d; on a DLQ: %t",
		failedBefore, calls.Load(), counts, total, maxTries*2, dl.calls[id] == 1)
	assert.EqualValues(t, maxTries, calls.Load(), "maxTries calls after the move")
	assert.LessOrEqual(t, total, maxTries*2)
	assert.Equal(t, 1, dl.calls[id])
}
