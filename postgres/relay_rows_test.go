package postgres

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Crafted rows among good ones: deliver_at 'infinity' or '-infinity', an
// attempts count at the integer's maximum, an error text of invalid UTF-8
// (with a NUL) or of megabytes. The claim reads every row, the bad one gets
// an error of its own, and the mark records each outcome: no round fails.
func TestRelayClaimsAndMarksCraftedRows(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	ids := writeOrders(t, db, "orders", 6, nil)
	set := func(sql, id string) {
		_, err := db.pool.Exec(ctx, "UPDATE babelqueue_outbox SET "+sql+" WHERE message_id = $1", id)
		require.NoError(t, err)
	}
	set("deliver_at = 'infinity'", ids[1])
	set("deliver_at = '-infinity'", ids[2])
	set("attempts = 2147483647", ids[3])

	r := NewRelay(db.pool, nil, nil)
	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := claim(ctx, tx, 100, nil, nil)
	require.NoError(t, err, "one crafted row must not fail the claim of the others")
	require.Len(t, rows, 6)
	byID := map[string]*row{}
	for _, rw := range rows {
		byID[rw.id] = rw
	}
	assert.ErrorIs(t, byID[ids[1]].err, ErrInvalid, "a deliver_at of infinity is this row's error")
	assert.NoError(t, byID[ids[2]].err, "a deliver_at of -infinity is due at once")
	assert.Nil(t, byID[ids[2]].deliverAt)
	assert.NoError(t, byID[ids[0]].err)

	byID[ids[3]].err = errors.New("refused")
	byID[ids[4]].err = errors.New("bad \xff\xfe text\x00 here")
	byID[ids[5]].err = errors.New(strings.Repeat("é", 4<<20))
	_, err = r.mark(ctx, tx, rows)
	require.NoError(t, err, "one crafted row must not fail the mark of the others")
	require.NoError(t, tx.Commit(ctx))

	assert.Equal(t, 2, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NOT NULL"))
	var attempts int64
	var parked bool
	require.NoError(t, db.pool.QueryRow(ctx, "SELECT attempts, parked_at IS NOT NULL FROM babelqueue_outbox WHERE message_id = $1", ids[3]).Scan(&attempts, &parked))
	assert.EqualValues(t, math.MaxInt32, attempts)
	assert.True(t, parked)
	for _, id := range ids[4:] {
		var text string
		require.NoError(t, db.pool.QueryRow(ctx, "SELECT last_error FROM babelqueue_outbox WHERE message_id = $1", id).Scan(&text))
		assert.True(t, utf8.ValidString(text))
		assert.LessOrEqual(t, len(text), maxErrorText)
		assert.NotContains(t, text, "\x00")
	}
}
