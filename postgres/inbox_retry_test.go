package postgres

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// An inbox consumer with the default retry schedule and maxTries rides out
// its database being unreachable for 6 s under a steady stream: nothing is
// dead-lettered, every message is charged exactly once after the outage.
func TestInboxRidesOutADatabaseOutageWithTheDefaultRetries(t *testing.T) {
	const n, outage = 600, 6 * time.Second
	db, amqpURL, queue := newBrokerDB(t)
	_, err := db.pool.Exec(context.Background(), chargesTable)
	require.NoError(t, err)
	// The inbox's own pool reaches PostgreSQL through a proxy the test cuts.
	p := newProxy(t, hostPort(t, db.url))
	through := openDB(t, p.url(t, db.url), db.schema, false)
	inbox, err := NewInbox(through.pool, "billing", nil)
	require.NoError(t, err)
	var calls, failed atomic.Int64
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: inbox.Handle(chargeOnce)}, artemis.WithConcurrency(4), artemis.WithLogger(slog.New(slog.DiscardHandler)),
		artemis.WithObserver(observerFunc(func(ev artemis.SettleEvent) {
			calls.Add(1)
			if ev.Kind == artemis.KindHandlerFailed {
				failed.Add(1)
			}
		})))
	require.NoError(t, err)
	c := dial(t, amqpURL)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Consume(ctx, queue, cons) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Consume: %v", err)
		}
	})

	pub, err := c.Publisher(context.Background(), queue)
	require.NoError(t, err)
	var ids []string
	var cutAt, upAt time.Time
	var once sync.Once
	for i := range n {
		if i == n/3 {
			once.Do(func() { p.cut(); cutAt = time.Now() })
		}
		if !cutAt.IsZero() && upAt.IsZero() && time.Since(cutAt) >= outage {
			p.restore()
			upAt = time.Now()
		}
		id, err := pub.Publish(context.Background(), artemis.Job(urnOrder, map[string]any{"order_id": i}))
		require.NoError(t, err)
		ids = append(ids, id)
		time.Sleep(15 * time.Millisecond) // a steady stream of about 60 a second
	}
	if upAt.IsZero() {
		time.Sleep(time.Until(cutAt.Add(outage)))
		p.restore()
		upAt = time.Now()
	}
	deadline := time.Now().Add(2 * time.Minute)
	charged := 0
	for time.Now().Before(deadline) {
		if charged = db.count(t, "SELECT count(DISTINCT message_id) FROM charges"); charged == n {
			break
		}
		time.Sleep(200 * time.Millisecond) // the retries wait on the broker's clock
	}
	drained := time.Since(upAt)
	time.Sleep(2 * time.Second) // a late duplicate would show now
	total := db.count(t, "SELECT count(*) FROM charges")
	dead := 0
	if b, err := dialDLQ(t, amqpURL, queue+".dlq"); err == nil {
		dead = b
	}
	line(t, "inbox, database unreachable for %v under about 60 msg/s, default retries: %d messages, charged %d, charged twice %d, dead-lettered %d, handler failures %d, settlements %d, all charged %.1f s after the database was back",
		outage, n, charged, total-charged, dead, failed.Load(), calls.Load(), drained.Seconds())
	assert.Equal(t, n, charged, "every message charged")
	assert.Equal(t, n, db.count(t, "SELECT count(DISTINCT message_id) FROM charges WHERE message_id = ANY($1)", ids), "the messages charged are those published")
	assert.Equal(t, charged, total, "none charged twice")
	assert.Zero(t, dead, "nothing dead-lettered")
	assert.Positive(t, failed.Load(), "the outage failed nothing: the test did not test")
}

type observerFunc func(artemis.SettleEvent)

func (f observerFunc) Settled(ev artemis.SettleEvent) { f(ev) }
func (observerFunc) Published(artemis.PublishEvent)   {}

// dialDLQ counts (and takes) what is on addr: messages arrive until none
// comes for 2 s.
func dialDLQ(t testing.TB, amqpURL, addr string) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, amqpURL, nil)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		return 0, err
	}
	r, err := sess.NewReceiver(ctx, addr, &amqp.ReceiverOptions{SourceCapabilities: []string{"queue"}, Credit: 100})
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := r.Receive(rctx, nil)
		rcancel()
		if err != nil {
			return n, nil
		}
		_ = r.AcceptMessage(ctx, m)
		n++
	}
}
