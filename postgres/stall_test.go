package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A row that is parked, or waits out a back-off, holds back only the later
// rows of its group: with more of them waiting than all the relays' rounds
// claim together, the rows of other groups and without a group still go
// out at once, and the held rows wait in order.
func TestOutboxHeldGroupHoldsBackOnlyItself(t *testing.T) {
	const held, free = 800, 5
	for _, tc := range []struct {
		name          string
		hold          string // how the head of the group is held
		relays, batch int    // batch 0: the default
	}{
		{"parked/one relay", holdParked, 1, 0},
		{"backing off/one relay", holdBackingOff, 1, 0},
		{"parked/four relays", holdParked, 4, 50},
		{"backing off/four relays", holdBackingOff, 4, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, amqpURL, queue := newBrokerDB(t)
			head := writeRows(t, db, queue, 1, "tenant-7")[0]
			_, err := db.pool.Exec(context.Background(), tc.hold, head)
			require.NoError(t, err)
			behind := writeRows(t, db, queue, held, "tenant-7")
			other := writeRows(t, db, queue, 1, "tenant-8")
			ungrouped := writeRows(t, db, queue, free, "")
			goes := append(append([]string{}, other...), ungrouped...)

			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			start := time.Now()
			for range tc.relays {
				relay := NewRelay(db.pool, dial(t, amqpURL), &RelayOptions{BatchSize: tc.batch})
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = relay.Run(ctx)
					_ = relay.Close(context.Background())
				}()
			}
			deadline := time.Now().Add(15 * time.Second)
			published := 0
			for time.Now().Before(deadline) {
				published = db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE message_id = ANY($1) AND published_at IS NOT NULL", goes)
				if published == len(goes) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			took := time.Since(start)
			cancel()
			wg.Wait()
			line(t, "held group (%s): %d of %d rows of other groups or none published in %v, %d rows held behind the head of tenant-7",
				tc.name, published, len(goes), took.Round(time.Millisecond), held)
			require.Equal(t, len(goes), published, "rows of other groups published within 15 s")
			assert.Zero(t, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE message_id = ANY($1) AND published_at IS NOT NULL",
				append([]string{head}, behind...)), "rows of tenant-7 published past their held head")

			col := collect(t, dial(t, amqpURL), queue)
			col.await(t, len(goes), 300*time.Millisecond)
			col.requireEach(t, goes)
		})
	}
}

// The held rows of a group go on, in order, once their head is out of the
// way; the claim stays cheap however many rows are held.
func TestOutboxHeldGroupResumesInOrder(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	client := dial(t, amqpURL)
	head := writeRows(t, db, queue, 1, "tenant-7")[0]
	_, err := db.pool.Exec(context.Background(), holdParked, head)
	require.NoError(t, err)
	behind := writeRows(t, db, queue, 2000, "tenant-7")
	relay := NewRelay(db.pool, client, nil)
	t.Cleanup(func() { _ = relay.Close(context.Background()) })

	start := time.Now()
	ev, err := relay.RelayOnce(context.Background())
	require.NoError(t, err)
	idle := time.Since(start)
	assert.Zero(t, ev.Claimed, "a round claims none of the held rows")

	_, err = db.pool.Exec(context.Background(), "DELETE FROM babelqueue_outbox WHERE message_id = $1", head)
	require.NoError(t, err)
	drain(t, relay)
	col := collect(t, client, queue)
	col.await(t, len(behind), 300*time.Millisecond)
	col.requireEach(t, behind)
	col.mu.Lock()
	defer col.mu.Unlock()
	for i, env := range col.order {
		require.Equal(t, behind[i], env.Meta.ID, "delivery %d out of order", i)
	}
	line(t, "held group resumes: a round over %d held rows took %v and claimed none; after the head's removal all of them went out in order",
		len(behind), idle.Round(time.Microsecond))
}

const (
	holdParked = `UPDATE babelqueue_outbox SET body = convert_to('{not json', 'UTF8'), attempts = 10,
    parked_at = now(), last_error = 'damaged' WHERE message_id = $1`
	holdBackingOff = `UPDATE babelqueue_outbox SET attempts = 1, next_attempt_at = now() + interval '1 hour',
    last_error = 'refused once' WHERE message_id = $1`
)

// writeRows writes n outbox rows of group (blank: none) to queue in one
// transaction and returns their ids in order.
func writeRows(t testing.TB, db *testDB, queue string, n int, group string) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	var opts []BuildOption
	if group != "" {
		opts = append(opts, WithGroupID(group))
	}
	require.NoError(t, pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		for i := range ids {
			var err error
			if ids[i], err = Write(ctx, tx, queue, urnOrder, map[string]any{"n": i, "group": group}, opts...); err != nil {
				return err
			}
		}
		return nil
	}))
	return ids
}

// A group being relayed holds back only itself: the rows of a long group
// that one round is sending, one after the other, never fill the other
// rounds' batches, so rows written after the whole group go out while most
// of it is still pending (four relays of three rounds each).
func TestOutboxGroupInFlightHoldsBackOnlyItself(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	const n = 3000
	long := writeRows(t, db, queue, n, "tenant-9")
	free := writeRows(t, db, queue, 5, "")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		relay := NewRelay(db.pool, dial(t, amqpURL), &RelayOptions{BatchSize: 100})
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = relay.Run(ctx)
			_ = relay.Close(context.Background())
		}()
	}
	var freeAt time.Duration
	pending := -1
	for time.Since(start) < 90*time.Second {
		var published int
		require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT
    count(*) FILTER (WHERE message_id = ANY($1) AND published_at IS NOT NULL),
    count(*) FILTER (WHERE message_id = ANY($2) AND published_at IS NULL)
FROM babelqueue_outbox`, free, long).Scan(&published, &pending))
		if published == len(free) || pending == 0 {
			freeAt = time.Since(start)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, 90*time.Second, func() bool {
		return db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL") == 0
	})
	drained := time.Since(start)
	cancel()
	wg.Wait()
	line(t, "group in flight: the 5 rows written after a group of %d were out after %v with %d of the group pending; the group drained in %v",
		n, freeAt.Round(time.Millisecond), pending, drained.Round(time.Millisecond))
	assert.Greater(t, pending, n/2, "rows of the long group still pending when the later rows were out")

	col := collect(t, dial(t, amqpURL), queue)
	col.await(t, n+len(free), 300*time.Millisecond)
	col.requireEach(t, append(append([]string{}, long...), free...))
	col.mu.Lock()
	defer col.mu.Unlock()
	next := 0
	for _, env := range col.order {
		if next < n && env.Meta.ID == long[next] {
			next++
		}
	}
	assert.Equal(t, n, next, "the group's rows in the order written")
}

// A round whose ctx is cancelled after the broker took its rows, while the
// database stops answering, returns at the rollback's bound: the relay
// does not outlive its ctx by more than that. Nothing is lost: the rows
// were not marked, so once the network heals the next round sends them
// again (the broker's duplicate detection drops the copies).
func TestRelayRoundCutWhileTheDatabaseStallsReturns(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	ids := writeRows(t, db, queue, 3, "")
	stalled, proxy := behindProxy(t, db)

	relay := NewRelay(stalled.pool, dial(t, amqpURL), nil)
	t.Cleanup(func() { _ = relay.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cut time.Time
	relay.afterPublish = func([]string) {
		proxy.Stall() // the round's ROLLBACK gets no answer
		cut = time.Now()
		cancel()
	}
	done := make(chan error, 1)
	go func() {
		_, err := relay.RelayOnce(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err, "the round's marks were cut")
		t.Logf("the round returned %v after its ctx was cancelled", time.Since(cut).Round(time.Millisecond))
	case <-time.After(rollbackTimeout + 25*time.Second):
		t.Fatalf("the round still runs %v after its ctx was cancelled, on a stalled database", time.Since(cut).Round(time.Millisecond))
	}
	relay.afterPublish = nil

	proxy.Heal()
	assert.Equal(t, len(ids), db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE message_id = ANY($1) AND published_at IS NULL", ids),
		"the rows of the cut round are not marked published")
	ev, err := relay.RelayOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, len(ids), ev.Published, "the next round sends them again")
	col := collect(t, dial(t, amqpURL), queue)
	col.await(t, len(ids), 300*time.Millisecond)
	col.requireEach(t, ids)
}
