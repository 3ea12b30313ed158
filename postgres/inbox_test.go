package postgres

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// 24 copies of one envelope (one meta.id), delivered to 24 workers at
// once, run the effect once.
func TestInboxConcurrentDeliveriesOfOneIDRunOnce(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	ctx := context.Background()
	_, err := db.pool.Exec(ctx, chargesTable)
	require.NoError(t, err)
	client := dial(t, amqpURL)
	pub, err := client.Publisher(ctx, queue) // no duplicate detection: 24 copies are stored
	require.NoError(t, err)
	env, err := artemis.NewEnvelope(urnOrder, map[string]int{"amount": 7}, artemis.EnvelopeQueue(queue))
	require.NoError(t, err)
	const copies = 24
	for range copies {
		_, err := pub.Publish(ctx, env)
		require.NoError(t, err)
	}

	var ran, skipped, handled, arrived atomicCount
	inbox, err := NewInbox(db.pool, "billing", &InboxOptions{OnDuplicate: func(*artemis.Envelope) { skipped.add() }})
	require.NoError(t, err)
	start := make(chan struct{})
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: func(ctx context.Context, e *artemis.Envelope, m *amqp.Message) error {
		arrived.add()
		<-start // every worker holds a copy before any goes on
		defer handled.add()
		return inbox.Handle(func(ctx context.Context, tx pgx.Tx, e *artemis.Envelope, m *amqp.Message) error {
			ran.add()
			time.Sleep(50 * time.Millisecond) // a slow effect: the others wait on its record
			return chargeOnce(ctx, tx, e, m)
		})(ctx, e, m)
	}}, artemis.WithConcurrency(copies), artemis.WithCredit(copies), artemis.WithoutDeadLetter())
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Consume(cctx, queue, cons)
	}()
	waitFor(t, 30*time.Second, func() bool { return arrived.get() == copies }) // 24 workers hold a copy each
	close(start)
	waitFor(t, 30*time.Second, func() bool { return handled.get() == copies })
	cancel()
	<-done
	charges := db.count(t, "SELECT count(*) FROM charges WHERE message_id = $1", env.Meta.ID)
	assert.Equal(t, 1, ran.get(), "handler runs")
	assert.Equal(t, copies-1, skipped.get())
	assert.Equal(t, 1, charges)
	line(t, "24 concurrent deliveries of one id: handler runs %d, accepted as duplicates %d, effects %d", ran.get(), skipped.get(), charges)
}

// A handler error rolls back the record and the effect, and the delivery
// takes the retry path; the next delivery runs the handler and commits.
// An envelope without meta.id runs the handler without a record.
func TestInboxHandlerErrorRollsBack(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	_, err := db.pool.Exec(ctx, chargesTable)
	require.NoError(t, err)
	inbox, err := NewInbox(db.pool, "billing", nil)
	require.NoError(t, err)
	boom := errors.New("card declined")
	calls := 0
	h := inbox.Handle(func(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, msg *amqp.Message) error {
		calls++
		if err := chargeOnce(ctx, tx, env, msg); err != nil {
			return err
		}
		if calls == 1 {
			return boom
		}
		return nil
	})
	env, err := artemis.NewEnvelope(urnOrder, nil, artemis.EnvelopeQueue("q"))
	require.NoError(t, err)
	require.ErrorIs(t, h(ctx, env, &amqp.Message{}), boom)
	assert.Zero(t, db.count(t, "SELECT count(*) FROM charges"))
	assert.Zero(t, db.count(t, "SELECT count(*) FROM babelqueue_inbox"))
	require.NoError(t, h(ctx, env, &amqp.Message{}))
	require.NoError(t, h(ctx, env, &amqp.Message{}))
	assert.Equal(t, 2, calls)
	assert.Equal(t, 1, db.count(t, "SELECT count(*) FROM charges"))
	assert.Equal(t, 1, db.count(t, "SELECT count(*) FROM babelqueue_inbox WHERE consumer = 'billing' AND message_id = $1", env.Meta.ID))

	// Another consumer name keeps records of its own.
	other, err := NewInbox(db.pool, "shipping", nil)
	require.NoError(t, err)
	ran := false
	require.NoError(t, other.Handle(func(context.Context, pgx.Tx, *artemis.Envelope, *amqp.Message) error {
		ran = true
		return nil
	})(ctx, env, &amqp.Message{}))
	assert.True(t, ran)

	noID := *env
	noID.Meta.ID = ""
	require.NoError(t, h(ctx, &noID, &amqp.Message{}))
	assert.Equal(t, 3, calls)
	assert.Equal(t, 2, db.count(t, "SELECT count(*) FROM babelqueue_inbox"), "no record without a meta.id")

	_, err = NewInbox(db.pool, " ", nil)
	assert.ErrorIs(t, err, ErrInvalid)
}

// Records older than the retention are purged, in batches; newer ones kept.
func TestInboxPurge(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	_, err := db.pool.Exec(ctx, `INSERT INTO babelqueue_inbox (consumer, message_id, processed_at)
SELECT 'billing', 'old-' || i, now() - interval '8 days' FROM generate_series(1, 2500) i
UNION ALL SELECT 'billing', 'new-' || i, now() - interval '6 days' FROM generate_series(1, 10) i
UNION ALL SELECT 'shipping', 'old-' || i, now() - interval '8 days' FROM generate_series(1, 5) i`)
	require.NoError(t, err)
	inbox, err := NewInbox(db.pool, "billing", nil) // 7 days
	require.NoError(t, err)
	n, err := inbox.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2500), n)
	assert.Equal(t, 10, db.count(t, "SELECT count(*) FROM babelqueue_inbox WHERE consumer = 'billing'"))
	assert.Equal(t, 5, db.count(t, "SELECT count(*) FROM babelqueue_inbox WHERE consumer = 'shipping'"), "another consumer's records")
}

// A deliberate replay (bq-replay-bypass) of a recorded id runs the
// handler again, with its external effect bypassed; an ordinary duplicate
// after it is still skipped.
func TestInboxReplayRunsAgain(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	ctx := context.Background()
	_, err := db.pool.Exec(ctx, "CREATE TABLE ledger (message_id text PRIMARY KEY, runs int NOT NULL)")
	require.NoError(t, err)
	client := dial(t, amqpURL)
	var runs, mails, skipped atomicCount
	inbox, err := NewInbox(db.pool, "billing", &InboxOptions{OnDuplicate: func(*artemis.Envelope) { skipped.add() }})
	require.NoError(t, err)
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: inbox.Handle(
		func(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, _ *amqp.Message) error {
			runs.add()
			if _, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1, 1)
ON CONFLICT (message_id) DO UPDATE SET runs = ledger.runs + 1`, env.Meta.ID); err != nil {
				return err
			}
			return artemis.BypassExternalEffects(ctx, func() error {
				mails.add()
				return nil
			})
		})}, artemis.WithoutDeadLetter())
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Consume(cctx, queue, cons)
	}()
	defer func() {
		cancel()
		<-done
	}()
	pub, err := client.Publisher(ctx, queue)
	require.NoError(t, err)
	env, err := artemis.NewEnvelope(urnOrder, nil, artemis.EnvelopeQueue(queue))
	require.NoError(t, err)

	_, err = pub.Publish(ctx, env)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, func() bool { return runs.get() == 1 })
	_, err = pub.Publish(ctx, env, artemis.WithHeaders(map[string]string{artemis.HeaderReplayBypass: "true"}))
	require.NoError(t, err)
	waitFor(t, 30*time.Second, func() bool { return runs.get() == 2 })
	_, err = pub.Publish(ctx, env)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, func() bool { return skipped.get() == 1 })

	assert.Equal(t, 2, runs.get(), "the first delivery and the replay")
	assert.Equal(t, 1, mails.get(), "the external effect bypassed on the replay")
	assert.Equal(t, 2, db.count(t, "SELECT runs FROM ledger WHERE message_id = $1", env.Meta.ID))
	assert.Equal(t, 1, db.count(t, "SELECT count(*) FROM babelqueue_inbox WHERE message_id = $1", env.Meta.ID))
}

// A handler that panics or exits its goroutine (runtime.Goexit, as
// t.FailNow does) inside the inbox's transaction: the transaction is rolled
// back (its connection back in the pool, the record's row lock gone, the
// effect undone), and the delivery is settled once, as a failed attempt.
// So is a handler that fails after its ctx was cancelled.
func TestInboxRollsBackWhenTheHandlerPanicsOrExits(t *testing.T) {
	db := newDB(t)
	_, err := db.pool.Exec(context.Background(), chargesTable)
	require.NoError(t, err)
	inbox, err := NewInbox(db.pool, "billing", nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		end  func(cancel context.CancelFunc)
	}{
		{"panic", func(context.CancelFunc) { panic("handler bug") }},
		{"goexit", func(context.CancelFunc) { runtime.Goexit() }},
		{"cancelled", func(cancel context.CancelFunc) { cancel() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: inbox.Handle(func(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, msg *amqp.Message) error {
				if err := chargeOnce(ctx, tx, env, msg); err != nil {
					return err
				}
				tc.end(cancel)
				return ctx.Err()
			})}, artemis.WithoutDeadLetter(), artemis.WithLogger(slog.New(slog.DiscardHandler)))
			require.NoError(t, err)
			env, err := artemis.NewEnvelope(urnOrder, nil, artemis.EnvelopeQueue("orders"))
			require.NoError(t, err)
			msg, err := artemis.NewMessage(env)
			require.NoError(t, err)
			fr := fakelink.NewReceiver(t, "orders")
			fr.Track(msg)
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = cons.Handle(ctx, fr, msg)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Handle did not return")
			}
			d, ok := fr.Disposition(msg)
			require.True(t, ok, "the delivery is settled")
			assert.Equal(t, fakelink.Failed, d)
			assert.Zero(t, db.pool.Stat().AcquiredConns(), "the transaction's connection is back in the pool")
			assert.Zero(t, db.count(t, "SELECT count(*) FROM charges WHERE message_id = $1", env.Meta.ID), "the effect is rolled back")
			// No row lock left on the record: another transaction takes it at once.
			tx, err := db.pool.Begin(context.Background())
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.Background()) }()
			_, err = tx.Exec(context.Background(), "SET LOCAL lock_timeout = '2s'")
			require.NoError(t, err)
			tag, err := tx.Exec(context.Background(), insertInbox, "billing", env.Meta.ID)
			require.NoError(t, err, "the record's row is not locked")
			assert.EqualValues(t, 1, tag.RowsAffected(), "the record was rolled back")
		})
	}
}

// A server that stops answering while the inbox rolls back (a stalled
// network between the service and PostgreSQL) holds the delivery no longer
// than the rollback's own bound: the handler's error comes back, the
// delivery is settled once, the dead connection leaves the pool, and once
// the network heals the server has rolled the transaction back, so the
// message runs again from the start.
func TestInboxRollbackOnAStalledServerIsBounded(t *testing.T) {
	db := newDB(t)
	_, err := db.pool.Exec(context.Background(), chargesTable)
	require.NoError(t, err)
	stalled, proxy := behindProxy(t, db)

	inbox, err := NewInbox(stalled.pool, "billing", nil)
	require.NoError(t, err)
	boom := errors.New("card declined")
	calls := 0
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: inbox.Handle(func(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, msg *amqp.Message) error {
		calls++
		if err := chargeOnce(ctx, tx, env, msg); err != nil {
			return err
		}
		if calls == 1 {
			proxy.Stall() // the ROLLBACK that follows gets no answer
			return boom
		}
		return nil
	})}, artemis.WithoutDeadLetter(), artemis.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	env, err := artemis.NewEnvelope(urnOrder, nil, artemis.EnvelopeQueue("orders"))
	require.NoError(t, err)

	handle := func() (fakelink.Disposition, time.Duration) {
		t.Helper()
		msg, err := artemis.NewMessage(env)
		require.NoError(t, err)
		fr := fakelink.NewReceiver(t, "orders")
		fr.Track(msg)
		done := make(chan struct{})
		start := time.Now()
		go func() {
			defer close(done)
			_ = cons.Handle(context.Background(), fr, msg)
		}()
		select {
		case <-done:
		case <-time.After(rollbackTimeout + 25*time.Second):
			t.Fatalf("Handle still running %v after a stalled rollback", time.Since(start).Round(time.Millisecond))
		}
		d, ok := fr.Disposition(msg)
		require.True(t, ok, "the delivery is settled")
		return d, time.Since(start)
	}

	d, took := handle()
	assert.Equal(t, fakelink.Failed, d, "the handler's error fails the delivery")
	assert.GreaterOrEqual(t, took, rollbackTimeout, "Handle waited for the rollback's answer up to its bound")
	// pgx closes the timed-out connection in the background (it first tries
	// a cancel request, bounded at 15 s) and the pool counts it until then.
	waited := time.Now()
	for stalled.pool.Stat().AcquiredConns() != 0 && time.Since(waited) < 30*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	assert.Zero(t, stalled.pool.Stat().AcquiredConns(), "the stalled transaction's connection left the pool")
	t.Logf("Handle returned after %v; the connection left the pool %v later", took.Round(time.Millisecond), time.Since(waited).Round(time.Millisecond))

	proxy.Heal()
	// The server rolls the transaction back, on the held ROLLBACK or on the
	// closed connection: then the record's row is free and nothing was charged.
	tx, err := db.pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(context.Background(), "SET LOCAL lock_timeout = '20s'")
	require.NoError(t, err)
	tag, err := tx.Exec(context.Background(), insertInbox, "billing", env.Meta.ID)
	require.NoError(t, err, "the record's row is not left locked")
	assert.EqualValues(t, 1, tag.RowsAffected(), "the record was rolled back")
	require.NoError(t, tx.Rollback(context.Background()))
	assert.Zero(t, db.count(t, "SELECT count(*) FROM charges WHERE message_id = $1", env.Meta.ID), "the effect was rolled back")

	// Redelivered, the message runs again, once, through a fresh connection.
	d, _ = handle()
	assert.Equal(t, fakelink.Accepted, d)
	assert.Equal(t, 2, calls)
	assert.Equal(t, 1, db.count(t, "SELECT count(*) FROM charges WHERE message_id = $1", env.Meta.ID))
}

// A duplicate's transaction is rolled back, and its connection back in the
// pool, before OnDuplicate runs: a callback that uses the pool itself (a
// counter, an audit row) gets a connection even from a pool of one, rather
// than waiting for the one its own delivery holds.
func TestInboxOnDuplicateRunsWithTheConnectionReturned(t *testing.T) {
	db := newDB(t)
	cfg, err := pgxpool.ParseConfig(db.url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = db.schema
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var dupErr error
	dups := 0
	inbox, err := NewInbox(pool, "billing", &InboxOptions{OnDuplicate: func(*artemis.Envelope) {
		dups++
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // bounds the wait of the bug
		defer cancel()
		_, dupErr = pool.Exec(ctx, "SELECT 1")
	}})
	require.NoError(t, err)
	env, err := artemis.NewEnvelope(urnOrder, map[string]int{"amount": 7})
	require.NoError(t, err)
	h := inbox.Handle(func(context.Context, pgx.Tx, *artemis.Envelope, *amqp.Message) error { return nil })
	require.NoError(t, h(context.Background(), env, nil), "the first delivery commits its record")
	require.NoError(t, h(context.Background(), env, nil), "the duplicate is accepted")
	assert.Equal(t, 1, dups)
	assert.NoError(t, dupErr, "OnDuplicate got a connection of the pool of one")
}
