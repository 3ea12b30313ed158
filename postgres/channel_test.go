package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In a schema whose name is too long for PostgreSQL's channel names
// (63 bytes at most, "babelqueue_outbox:" included) a write succeeds and
// its notification wakes the relay, as in a schema with a short name.
func TestOutboxLongSchemaNameWritesAndWakes(t *testing.T) {
	for _, size := range []int{45, 46, 49, 63} {
		t.Run(strconv.Itoa(size)+" bytes", func(t *testing.T) {
			pgURL, amqpURL := need(t)
			schema := "bqt_" + token() + "_"
			schema += strings.Repeat("é", (size-len(schema))/2)
			schema += strings.Repeat("x", size-len(schema))
			require.Len(t, schema, size)
			db := openDB(t, pgURL, schema, true)
			queue := queueName(t)
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
			tx, err := db.pool.Begin(ctx)
			require.NoError(t, err)
			id, err := Write(ctx, tx, queue, urnOrder, map[string]int{"n": 1})
			if err == nil {
				err = tx.Commit(ctx)
			}
			_ = tx.Rollback(ctx)
			line(t, "schema name of %d bytes: write: %v", size, err)
			require.NoError(t, err, "a write in a schema named with %d bytes", size)
			deadline := time.Now().Add(10 * time.Second)
			for db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL") > 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			woke := time.Since(start)
			line(t, "schema name of %d bytes: published %v after the commit (poll interval 1 h)", size, woke.Round(time.Millisecond))
			assert.Less(t, woke, 5*time.Second, "the notification woke the relay")
			col := collect(t, client, queue)
			col.await(t, 1, 200*time.Millisecond)
			col.requireEach(t, []string{id})
		})
	}
}
