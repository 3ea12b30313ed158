package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// 10,000 orders through the outbox, two relays, the broker and a consumer
// with an inbox, whose handler fails now and then after its write (the
// delivery is retried): every order's effect happens exactly once.
func TestOrdersEndToEndEveryEffectOnce(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	ctx := context.Background()
	const orders, writers, customers = 10000, 8, 100
	_, err := db.pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, message_id text NOT NULL);`+chargesTable)
	require.NoError(t, err)

	// The consumer: an inbox whose handler fails 1 first attempt in 50
	// after writing its effect.
	consumerClient := dial(t, amqpURL)
	inbox, err := NewInbox(db.pool, "billing", nil)
	require.NoError(t, err)
	var runs, failures, charged atomicCount
	errFlaky := errors.New("flaky downstream")
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: inbox.Handle(
		func(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, msg *amqp.Message) error {
			k := runs.get()
			runs.add()
			if err := chargeOnce(ctx, tx, env, msg); err != nil {
				return err
			}
			if k%50 == 49 && env.Attempts == 0 {
				// A first attempt only: the retry that follows must be
				// able to succeed. (Failing any attempt 1 time in 50 let a
				// message fail all its tries now and then, and a message
				// dropped after its tries, with no dead-letter queue here,
				// is never charged.)
				failures.add()
				return errFlaky
			}
			charged.add()
			return nil
		})}, artemis.WithConcurrency(16), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}), artemis.WithoutDeadLetter())
	require.NoError(t, err)
	cctx, stopConsumer := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		_ = consumerClient.Consume(cctx, queue, cons)
	}()

	// Two relays.
	rctx, stopRelays := context.WithCancel(ctx)
	var relays sync.WaitGroup
	for range 2 {
		relay := NewRelay(db.pool, dial(t, amqpURL), &RelayOptions{PollInterval: 200 * time.Millisecond})
		relays.Add(1)
		go func() {
			defer relays.Done()
			_ = relay.Run(rctx)
			_ = relay.Close(context.Background())
		}()
	}

	// The order service: one transaction per order, the order row and its
	// message.
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < orders; i += writers {
				if err := placeOrder(ctx, db, queue, i, fmt.Sprintf("customer-%d", i%customers)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	written := time.Since(start)
	waitFor(t, 120*time.Second, func() bool { return charged.get() >= orders })
	elapsed := time.Since(start)
	time.Sleep(time.Second) // a duplicate would show up now
	stopRelays()
	relays.Wait()
	stopConsumer()
	<-consumed

	assert.Equal(t, orders, db.count(t, "SELECT count(*) FROM charges"))
	assert.Equal(t, orders, db.count(t, "SELECT count(DISTINCT message_id) FROM charges"))
	assert.Zero(t, db.count(t, `SELECT count(*) FROM orders o
LEFT JOIN (SELECT message_id, count(*) AS k FROM charges GROUP BY message_id) c USING (message_id)
WHERE c.k IS DISTINCT FROM 1`),
		"orders without exactly one charge")
	assert.Zero(t, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL"))
	line(t, "%d orders through outbox, 2 relays, broker, inbox: written in %v, all effects in %v (%.0f orders/s); %d handler runs, %d failed and retried, %d effects, 0 twice",
		orders, written.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(orders)/elapsed.Seconds(),
		runs.get(), failures.get(), db.count(t, "SELECT count(*) FROM charges"))
}

func placeOrder(ctx context.Context, db *testDB, queue string, id int, customer string) error {
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		msgID, err := Write(ctx, tx, queue, urnOrder, map[string]any{"order": id, "customer": customer}, WithGroupID(customer))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO orders (id, customer, message_id) VALUES ($1, $2, $3)", id, customer, msgID)
		return err
	})
}
