package postgres

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Migrate may run again, and from several processes at once.
func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	db := newDB(t) // migrated once already
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Migrate(context.Background(), db.pool)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, 2, db.count(t, `SELECT count(*) FROM information_schema.tables
WHERE table_schema = $1 AND table_name IN ('babelqueue_outbox', 'babelqueue_inbox')`, db.schema))
	assert.Equal(t, 1, db.count(t, `SELECT count(*) FROM information_schema.triggers
WHERE trigger_schema = $1 AND trigger_name = 'babelqueue_outbox_notify'`, db.schema))
	assert.Contains(t, Schema, "CREATE TABLE IF NOT EXISTS babelqueue_outbox")
}
