package postgres

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// BenchmarkRelayAgainstDirectPublish measures, in one run on the same
// broker and database, the relay's publish rate (rows already committed in
// the outbox, claimed, published with duplicate detection and marked) and
// the library's direct pipelined publish (PublishWithReceipt of the same
// messages with duplicate detection, then every receipt waited on), and
// reports relay/direct.
//
//	go test -run '^$' -bench RelayAgainstDirect -benchtime 5x ./postgres
//
// Each iteration publishes 5,000 messages each way, the direct ones first;
// the figures are the medians over the iterations.
func BenchmarkRelayAgainstDirectPublish(b *testing.B) {
	const n = 5000
	db := newDB(b)
	_, amqpURL := need(b)
	client := dial(b, amqpURL)
	ctx := context.Background()
	var relayRates, directRates, ratios []float64
	for b.Loop() {
		b.StopTimer()
		queue := queueName(b)
		writeBatch(b, db, queue, n)
		obs := &publishedCounter{want: n, done: make(chan struct{})}
		relay := NewRelay(db.pool, client, &RelayOptions{BatchSize: 500, Observer: obs})
		pub, err := client.Publisher(ctx, queue+".direct", artemis.WithDuplicateDetection())
		require.NoError(b, err)
		b.StartTimer()

		start := time.Now()
		receipts := make([]*artemis.Receipt, 0, n)
		for i := range n {
			r, err := pub.PublishWithReceipt(ctx, artemis.Job(urnOrder, map[string]any{"n": i, "group": ""}))
			require.NoError(b, err)
			receipts = append(receipts, r)
		}
		for _, r := range receipts {
			require.NoError(b, r.Wait(ctx))
		}
		direct := time.Since(start)

		start = time.Now()
		rctx, stop := context.WithCancel(ctx)
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			_ = relay.Run(rctx)
		}()
		select {
		case <-obs.done:
		case <-time.After(2 * time.Minute):
			b.Fatal("the relay did not publish every row in 2 min")
		}
		relayed := time.Since(start)
		stop()
		<-ran

		b.StopTimer()
		require.Zero(b, db.count(b, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL"))
		directRates = append(directRates, n/direct.Seconds())
		relayRates = append(relayRates, n/relayed.Seconds())
		ratios = append(ratios, direct.Seconds()/relayed.Seconds())
		_ = relay.Close(ctx)
		_ = pub.Close(ctx)
		purgeQueue(b, client, queue)
		purgeQueue(b, client, queue+".direct")
		b.StartTimer()
	}
	// Medians: the machine's load moves single runs a lot.
	b.ReportMetric(median(directRates), "direct-msg/s")
	b.ReportMetric(median(relayRates), "relay-msg/s")
	b.ReportMetric(median(ratios), "relay/direct")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkInboxAgainstPlainHandler measures a handler that inserts one row
// in a transaction of its own, and the same handler under the Inbox (which
// adds the record's insert to that transaction), called directly with
// fresh ids (no broker), and reports inbox/plain per message.
//
//	go test -run '^$' -bench InboxAgainstPlain -benchtime 2000x ./postgres
func BenchmarkInboxAgainstPlainHandler(b *testing.B) {
	db := newDB(b)
	ctx := context.Background()
	_, err := db.pool.Exec(ctx, chargesTable)
	require.NoError(b, err)
	inbox, err := NewInbox(db.pool, "billing", nil)
	require.NoError(b, err)
	wrapped := inbox.Handle(chargeOnce)
	plain := func(ctx context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error { return chargeOnce(ctx, tx, env, msg) })
	}
	msg := &amqp.Message{}
	var plainTime, inboxTime time.Duration
	for b.Loop() {
		env, err := artemis.NewEnvelope(urnOrder, nil, artemis.EnvelopeQueue("q"))
		require.NoError(b, err)
		other := *env
		other.Meta.ID += "-plain"
		start := time.Now()
		require.NoError(b, plain(ctx, &other, msg))
		mid := time.Now()
		require.NoError(b, wrapped(ctx, env, msg))
		inboxTime += time.Since(mid)
		plainTime += mid.Sub(start)
	}
	b.ReportMetric(float64(plainTime.Microseconds())/float64(b.N), "plain-µs/msg")
	b.ReportMetric(float64(inboxTime.Microseconds())/float64(b.N), "inbox-µs/msg")
	b.ReportMetric(float64(inboxTime)/float64(plainTime), "inbox/plain")
}

// writeBatch writes n outbox rows in transactions of 500.
func writeBatch(b *testing.B, db *testDB, queue string, n int) {
	ctx := context.Background()
	for i := 0; i < n; i += 500 {
		require.NoError(b, pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			for j := i; j < min(i+500, n); j++ {
				if _, err := Write(ctx, tx, queue, urnOrder, map[string]any{"n": j, "group": ""}); err != nil {
					return err
				}
			}
			return nil
		}))
	}
}

// purgeQueue consumes what a benchmark left on queue, so the broker does
// not keep it.
func purgeQueue(b *testing.B, c *artemis.Client, queue string) {
	var got atomicCount
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		got.add()
		return nil
	}}, artemis.WithConcurrency(8), artemis.WithoutDeadLetter())
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Consume(ctx, queue, cons)
	}()
	last, idle := -1, 0
	for idle < 5 {
		time.Sleep(100 * time.Millisecond)
		if k := got.get(); k == last {
			idle++
		} else {
			last, idle = k, 0
		}
	}
	cancel()
	<-done
}

// publishedCounter closes done once want rows were marked published.
type publishedCounter struct {
	mu   sync.Mutex
	n    int
	want int
	done chan struct{}
}

func (*publishedCounter) Settled(artemis.SettleEvent)    {}
func (*publishedCounter) Published(artemis.PublishEvent) {}

func (c *publishedCounter) Relayed(ev RelayEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.n
	c.n += ev.Published
	if before < c.want && c.n >= c.want {
		close(c.done)
	}
}
