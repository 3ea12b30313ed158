package postgres

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// Write builds its envelope with the options of WithEnvelope after the
// queue; its WriteOptions configure the row; WriteEnvelope, whose envelope
// is built, takes WriteOptions alone. No database is needed.
func TestWriteBuildsTheEnvelopeWithItsOptions(t *testing.T) {
	created := time.UnixMilli(1749132727000)
	env, cfg, err := buildWrite("orders", urnOrder, map[string]int{"n": 1}, []BuildOption{
		WithGroupID("customer-7"),
		WithEnvelope(artemis.EnvelopeTraceID(" trace-1 "), artemis.EnvelopeCreatedAt(created)),
		WithDelay(time.Minute),
	})
	require.NoError(t, err)
	assert.Equal(t, "trace-1", env.TraceID)
	assert.Equal(t, created.UnixMilli(), env.Meta.CreatedAt)
	assert.Equal(t, "orders", env.Meta.Queue)
	assert.Equal(t, "customer-7", cfg.groupID)
	assert.Equal(t, time.Minute, cfg.delay)

	env, _, err = buildWrite("orders", urnOrder, nil, []BuildOption{WithEnvelope(artemis.EnvelopeQueue("orders.logical"))})
	require.NoError(t, err)
	assert.Equal(t, "orders.logical", env.Meta.Queue, "an EnvelopeQueue of WithEnvelope replaces the queue")
	assert.NotEmpty(t, env.TraceID, "a fresh trace id without EnvelopeTraceID")

	_, _, err = buildWrite("orders", urnOrder, nil, []BuildOption{WithEnvelope(artemis.EnvelopeTraceID("t\xfe"))})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorIs(t, err, artemis.ErrInvalidEnvelope)

	withEnvelope := reflect.TypeOf(WithEnvelope())
	last := reflect.TypeOf(WriteEnvelope)
	last = last.In(last.NumIn() - 1).Elem()
	assert.Equal(t, reflect.TypeOf(WriteOption(nil)), last)
	assert.False(t, withEnvelope.AssignableTo(last), "WriteEnvelope cannot take WithEnvelope")
	assert.True(t, withEnvelope.Implements(reflect.TypeOf((*BuildOption)(nil)).Elem()), "Write takes it")
}

// A rolled-back transaction leaves no message; a committed one exactly
// one, whose body is the stored bytes.
func TestOutboxRollbackNothingCommitOne(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	client := dial(t, amqpURL)
	ctx := context.Background()

	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	gone, err := Write(ctx, tx, queue, urnOrder, map[string]int{"n": 1})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	tx, err = db.pool.Begin(ctx)
	require.NoError(t, err)
	kept, err := Write(ctx, tx, queue, urnOrder, map[string]any{"n": 2, "who": "Zoë"},
		WithHeaders(map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	assert.Equal(t, 1, db.count(t, "SELECT count(*) FROM babelqueue_outbox"))

	relay := NewRelay(db.pool, client, nil)
	t.Cleanup(func() { _ = relay.Close(context.Background()) })
	drain(t, relay)
	col := collect(t, client, queue)
	dups, total := col.await(t, 1, 500*time.Millisecond)
	col.requireEach(t, []string{kept})
	assert.Zero(t, col.counts[gone])

	var body []byte
	require.NoError(t, db.pool.QueryRow(ctx, "SELECT body FROM babelqueue_outbox WHERE message_id = $1", kept).Scan(&body))
	assert.Equal(t, string(body), col.bodies[kept], "the published body is the stored bytes")
	assert.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", col.traceparent[kept])
	assert.Equal(t, 1, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NOT NULL"))
	line(t, "rollback/commit: rolled back %d messages stored, committed 1 stored %d time(s); %d deliveries, %d duplicates", col.counts[gone], col.counts[kept], total, dups)
}

// Rows of a group go out in the order they were written; the broker keeps
// that order for a consumer; four relays on one table publish no row
// twice.
func TestOutboxFourRelaysPublishNothingTwice(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	const n, groups = 2000, 40
	ids := writeOrders(t, db, queue, n, func(i int) string {
		if i%4 == 3 {
			return "" // a quarter without a group
		}
		return "customer-" + string(rune('A'+i%groups))
	})

	obs := newCountingObserver()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		client := dial(t, amqpURL) // a connection of its own, as four processes would have
		relay := NewRelay(db.pool, client, &RelayOptions{BatchSize: 100, Observer: obs, PollInterval: 100 * time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = relay.Run(ctx)
			_ = relay.Close(context.Background())
		}()
	}
	deadline := time.Now().Add(90 * time.Second)
	for db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL") > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	require.Zero(t, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL"), "rows left pending")

	published, twice := obs.summary()
	assert.Equal(t, n, published, "ids published")
	assert.Zero(t, twice, "ids published more than once")
	assert.Zero(t, obs.failed(), "publishes not accepted")

	consumerClient := dial(t, amqpURL)
	col := collect(t, consumerClient, queue)
	dups, total := col.await(t, n, time.Second)
	col.requireEach(t, ids)
	// Per group, the consumer saw the rows in the order they were written.
	last := map[string]int{}
	col.mu.Lock()
	for _, env := range col.order {
		var d struct {
			N     int    `json:"n"`
			Group string `json:"group"`
		}
		require.NoError(t, env.Bind(&d))
		require.Equal(t, d.Group, col.groups[env.Meta.ID], "the message's group-id")
		if d.Group == "" {
			continue
		}
		if prev, ok := last[d.Group]; ok {
			require.Greater(t, d.N, prev, "group %s out of order", d.Group)
		}
		last[d.Group] = d.N
	}
	col.mu.Unlock()
	line(t, "four relays: %d rows (%d groups) relayed in %v by 4 relays: %d ids published, %d published twice; %d stored, %d duplicates; group order kept",
		n, groups, elapsed.Round(time.Millisecond), published, twice, total, dups)
}

// A broker outage leaves the rows pending (none parked), and they drain
// once the broker is back.
func TestOutboxBrokerOutageRowsDrainAfter(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	px := newProxy(t, hostPort(t, amqpURL))
	client := dial(t, px.url(t, amqpURL))
	obs := newCountingObserver()
	relay := NewRelay(db.pool, client, &RelayOptions{Observer: obs, PollInterval: 100 * time.Millisecond,
		MaxAttempts: 2, PublishTimeout: 3 * time.Second,
		Backoff: func(n int) time.Duration { return min(time.Duration(n)*100*time.Millisecond, time.Second) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = relay.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = relay.Close(context.Background())
	})

	before := writeOrders(t, db, queue, 50, nil)
	waitFor(t, 30*time.Second, func() bool {
		return db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL") == 0
	})

	px.cut()
	during := writeOrders(t, db, queue, 200, func(i int) string {
		if i%2 == 0 {
			return "g" + string(rune('a'+i%5))
		}
		return ""
	})
	time.Sleep(3 * time.Second) // the relay keeps trying meanwhile
	pending := db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL")
	parked := db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE parked_at IS NOT NULL")
	assert.Equal(t, 200, pending, "rows pending during the outage")
	assert.Zero(t, parked, "an outage parks nothing")
	assert.Zero(t, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE attempts > 0"), "an outage counts no refusal")

	px.restore()
	outage := time.Now()
	waitFor(t, 60*time.Second, func() bool {
		return db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL") == 0
	})
	drained := time.Since(outage)

	col := collect(t, dial(t, amqpURL), queue)
	dups, total := col.await(t, 250, time.Second)
	col.requireEach(t, append(before, during...))
	line(t, "broker outage: %d rows pending during a 3 s outage, %d parked; drained %v after it; %d stored, %d duplicates",
		pending, parked, drained.Round(time.Millisecond), total, dups)
}

// A row the broker (here: the library) refuses is retried with back-off
// and parked after MaxAttempts, visible and never dropped; it holds back
// its group, and the other rows go out.
func TestOutboxParksARefusedRow(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	client := dial(t, amqpURL)
	ids := writeOrders(t, db, queue, 6, func(i int) string {
		if i < 3 {
			return "g1"
		}
		return ""
	})
	// Damage the first row of group g1 and one row without a group.
	_, err := db.pool.Exec(context.Background(),
		"UPDATE babelqueue_outbox SET body = convert_to('{not json', 'UTF8') WHERE message_id = ANY($1)", []string{ids[0], ids[4]})
	require.NoError(t, err)

	relay := NewRelay(db.pool, client, &RelayOptions{MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 }})
	t.Cleanup(func() { _ = relay.Close(context.Background()) })
	var refused, parked int
	for range 10 {
		ev, err := relay.RelayOnce(context.Background())
		require.NoError(t, err)
		refused += ev.Refused
		parked += ev.Parked
	}
	assert.Equal(t, 6, refused, "two rows refused three times each")
	assert.Equal(t, 2, parked)
	rows, err := db.pool.Query(context.Background(),
		"SELECT message_id, attempts, last_error FROM babelqueue_outbox WHERE parked_at IS NOT NULL ORDER BY seq")
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var id, last string
		var attempts int
		require.NoError(t, rows.Scan(&id, &attempts, &last))
		assert.Equal(t, 3, attempts)
		assert.Contains(t, last, "invalid envelope")
		got = append(got, id)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []string{ids[0], ids[4]}, got)
	// The rest of g1 waits behind its parked row; the rows without a group went.
	assert.Equal(t, 2, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL AND parked_at IS NULL"))

	col := collect(t, client, queue)
	col.await(t, 2, 500*time.Millisecond)
	col.requireEach(t, []string{ids[3], ids[5]})

	// Clearing parked_at (after fixing the row) puts it back: here the
	// damaged row is deleted instead, and g1 goes on.
	_, err = db.pool.Exec(context.Background(), "DELETE FROM babelqueue_outbox WHERE message_id = $1", ids[0])
	require.NoError(t, err)
	drain(t, relay)
	col.await(t, 4, 500*time.Millisecond)
	col.requireEach(t, []string{ids[1], ids[2], ids[3], ids[5]})
}

// Published rows are deleted after the retention time, the others never.
func TestOutboxRetentionPurge(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	client := dial(t, amqpURL)
	writeOrders(t, db, queue, 1205, nil)
	relay := NewRelay(db.pool, client, &RelayOptions{BatchSize: 500, Retention: time.Hour})
	t.Cleanup(func() { _ = relay.Close(context.Background()) })
	drain(t, relay)
	writeOrders(t, db, queue, 3, nil) // pending: never purged
	_, err := db.pool.Exec(context.Background(),
		"UPDATE babelqueue_outbox SET published_at = now() - interval '2 hours' WHERE seq IN (SELECT seq FROM babelqueue_outbox WHERE published_at IS NOT NULL ORDER BY seq LIMIT 1201)")
	require.NoError(t, err)
	n, err := relay.Purge(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(1201), n)
	assert.Equal(t, 4, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NOT NULL"))
	assert.Equal(t, 3, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL"))
	col := collect(t, client, queue)
	col.await(t, 1205, 200*time.Millisecond)
}

// A delayed write is published at once and delivered by the broker once
// the delay, counted from the write, is over.
func TestOutboxDelay(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	client := dial(t, amqpURL)
	ctx := context.Background()
	const delay = 1500 * time.Millisecond
	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	written := time.Now()
	id, err := Write(ctx, tx, queue, urnOrder, nil, WithDelay(delay))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	relay := NewRelay(db.pool, client, nil)
	t.Cleanup(func() { _ = relay.Close(context.Background()) })
	drain(t, relay)
	assert.Less(t, time.Since(written), delay, "published before the delay is over")
	col := collect(t, client, queue)
	col.await(t, 1, 0)
	col.requireEach(t, []string{id})
	col.mu.Lock()
	defer col.mu.Unlock()
	assert.GreaterOrEqual(t, col.received[id].Sub(written), delay-100*time.Millisecond, "delivered after the delay")
}

// A write is refused, and nothing stored, on a blank queue or URN.
func TestOutboxWriteRefusesInvalidInput(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = Write(ctx, tx, " ", urnOrder, nil)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = Write(ctx, tx, "q", "", nil)
	assert.ErrorIs(t, err, ErrInvalid)
	env, err := artemis.NewEnvelope(urnOrder, nil, artemis.EnvelopeQueue("q"))
	require.NoError(t, err)
	require.NoError(t, WriteEnvelope(ctx, tx, "q", env))
	err = WriteEnvelope(ctx, tx, "q", env)
	assert.Error(t, err, "a second write of one meta.id")
	assert.False(t, errors.Is(err, ErrInvalid))
}

// The relay wakes on NOTIFY: with a long poll interval, a committed row
// goes out at once.
func TestRelayWakesOnNotify(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	client := dial(t, amqpURL)
	relay := NewRelay(db.pool, client, &RelayOptions{PollInterval: time.Hour})
	listening := make(chan struct{})
	var once sync.Once
	relay.onListen = func() { once.Do(func() { close(listening) }) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = relay.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
		_ = relay.Close(context.Background())
	}()
	select {
	case <-listening:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not LISTEN in 30 s")
	}
	time.Sleep(200 * time.Millisecond) // the first rounds, which found nothing, are over
	start := time.Now()
	writeOrders(t, db, queue, 1, nil)
	waitFor(t, 10*time.Second, func() bool {
		return db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL") == 0
	})
	assert.Less(t, time.Since(start), 5*time.Second)
	col := collect(t, client, queue)
	_, total := col.await(t, 1, 200*time.Millisecond)
	assert.Equal(t, 1, total)
}

func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached in %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countingObserver counts the publishes by meta.id.
type countingObserver struct {
	mu       sync.Mutex
	accepted map[string]int
	other    int
	rounds   int
}

func newCountingObserver() *countingObserver {
	return &countingObserver{accepted: map[string]int{}}
}

func (o *countingObserver) Settled(artemis.SettleEvent) {}

func (o *countingObserver) Published(ev artemis.PublishEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ev.Outcome == artemis.PublishAccepted {
		o.accepted[ev.MessageID]++
	} else {
		o.other++
	}
}

func (o *countingObserver) Relayed(RelayEvent) {
	o.mu.Lock()
	o.rounds++
	o.mu.Unlock()
}

func (o *countingObserver) summary() (ids, twice int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range o.accepted {
		if k > 1 {
			twice++
		}
	}
	return len(o.accepted), twice
}

func (o *countingObserver) failed() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.other
}

// A fully qualified queue name with a blank part (address:: or ::queue) is
// refused before anything is written.
func TestWriteRefusesAQueueNameWithABlankPart(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	for _, queue := range []string{"orders::", "::orders", "::", " :: orders", "orders:: "} {
		tx, err := db.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = Write(ctx, tx, queue, urnOrder, nil)
		assert.ErrorIs(t, err, ErrInvalid, queue)
		require.NoError(t, tx.Rollback(ctx))
	}
	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = Write(ctx, tx, "orders::billing", urnOrder, nil)
	require.NoError(t, err, "address::queue is a queue name")
	require.NoError(t, tx.Commit(ctx))
	assert.Zero(t, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE queue <> 'orders::billing'"))
}
