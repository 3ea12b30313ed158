package artemis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryStoreClaimsAtomically: many goroutines claiming one id at once
// get exactly one acquired claim.
func TestMemoryStoreClaimsAtomically(t *testing.T) {
	store := NewMemoryStore()
	const n = 64
	var acquired, busy atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := store.Claim(context.Background(), "id-A", time.Minute, false)
			assert.NoError(t, err)
			switch c.Status {
			case ClaimAcquired:
				acquired.Add(1)
			case ClaimBusy:
				busy.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int64(1), acquired.Load())
	assert.Equal(t, int64(n-1), busy.Load())
}

type storeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newStoreClock() *storeClock {
	return &storeClock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *storeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *storeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func clockedStore(clock *storeClock, opts ...MemoryStoreOption) *MemoryStore {
	s := NewMemoryStore(opts...)
	s.now = clock.Now
	return s
}

func claimOf(t *testing.T, s IdempotencyStore, id string, lease time.Duration, replay bool) Claim {
	t.Helper()
	c, err := s.Claim(context.Background(), id, lease, replay)
	require.NoError(t, err)
	require.Equal(t, id, c.ID)
	return c
}

// TestMemoryStoreClaimExpiry: a claim whose holder died is taken over once
// its lease ends, and the dead holder's late calls do not undo the new
// holder's claim.
func TestMemoryStoreClaimExpiry(t *testing.T) {
	ctx := context.Background()
	clock := newStoreClock()
	s := clockedStore(clock)
	first := claimOf(t, s, "id-A", time.Minute, false)
	require.Equal(t, ClaimAcquired, first.Status)
	clock.Advance(time.Minute - time.Nanosecond)
	assert.Equal(t, ClaimBusy, claimOf(t, s, "id-A", time.Minute, false).Status)
	assert.Equal(t, ClaimBusy, claimOf(t, s, "id-A", time.Minute, true).Status, "a replay waits for a live claim too")
	clock.Advance(time.Nanosecond)
	second := claimOf(t, s, "id-A", time.Minute, false)
	require.Equal(t, ClaimAcquired, second.Status)
	assert.NotEqual(t, first.Token, second.Token)

	require.NoError(t, s.Release(ctx, first)) // the dead holder's late release
	assert.Equal(t, ClaimBusy, claimOf(t, s, "id-A", time.Minute, false).Status, "a stale release freed the new holder's claim")
	require.NoError(t, s.Release(ctx, second))
	third := claimOf(t, s, "id-A", time.Minute, false)
	require.Equal(t, ClaimAcquired, third.Status, "a release left the id claimed")

	require.NoError(t, s.Complete(ctx, first)) // a late success still counts
	assert.Equal(t, ClaimDone, claimOf(t, s, "id-A", time.Minute, false).Status)
	require.NoError(t, s.Release(ctx, third)) // the id is done now: nothing to give back
	assert.Equal(t, ClaimDone, claimOf(t, s, "id-A", time.Minute, false).Status)
}

// TestMemoryStoreExpiredClaimsAreSwept: claims nobody comes back for are
// dropped once their lease ended, so they do not hold memory forever.
func TestMemoryStoreExpiredClaimsAreSwept(t *testing.T) {
	clock := newStoreClock()
	s := clockedStore(clock)
	for _, id := range []string{"a", "b", "c"} {
		require.Equal(t, ClaimAcquired, claimOf(t, s, id, time.Minute, false).Status)
	}
	assert.Equal(t, 3, s.Len())
	clock.Advance(time.Minute)
	require.Equal(t, ClaimAcquired, claimOf(t, s, "d", time.Minute, false).Status)
	assert.Equal(t, 1, s.Len())
}

// TestMemoryStoreRetentionAndCapacity: a done id is remembered for the
// retention and no longer; a full store forgets its oldest done id first
// and never a live claim.
func TestMemoryStoreRetentionAndCapacity(t *testing.T) {
	ctx := context.Background()
	t.Run("retention", func(t *testing.T) {
		clock := newStoreClock()
		s := clockedStore(clock, WithMemoryRetention(time.Hour))
		require.NoError(t, s.Complete(ctx, claimOf(t, s, "id-A", time.Minute, false)))
		clock.Advance(time.Hour - time.Nanosecond)
		assert.Equal(t, ClaimDone, claimOf(t, s, "id-A", time.Minute, false).Status)
		clock.Advance(time.Nanosecond)
		assert.Equal(t, ClaimAcquired, claimOf(t, s, "id-A", time.Minute, false).Status)
	})
	t.Run("capacity", func(t *testing.T) {
		clock := newStoreClock()
		s := clockedStore(clock, WithMemoryCapacity(3))
		for _, id := range []string{"a", "b", "c", "d"} {
			require.NoError(t, s.Complete(ctx, claimOf(t, s, id, time.Minute, false)))
			clock.Advance(time.Second)
		}
		assert.Equal(t, 3, s.Len())
		assert.Equal(t, ClaimAcquired, claimOf(t, s, "a", time.Minute, false).Status, "the oldest done id was kept")
		// b was evicted for a's claim; c and d are still done.
		assert.Equal(t, ClaimDone, claimOf(t, s, "c", time.Minute, false).Status)
		assert.Equal(t, ClaimDone, claimOf(t, s, "d", time.Minute, false).Status)
	})
	t.Run("live claims are never evicted", func(t *testing.T) {
		s := clockedStore(newStoreClock(), WithMemoryCapacity(2))
		for _, id := range []string{"a", "b", "c"} {
			require.Equal(t, ClaimAcquired, claimOf(t, s, id, time.Minute, false).Status)
		}
		assert.Equal(t, 3, s.Len())
		for _, id := range []string{"a", "b", "c"} {
			assert.Equal(t, ClaimBusy, claimOf(t, s, id, time.Minute, false).Status)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		s := NewMemoryStore(WithMemoryCapacity(0), WithMemoryRetention(-1))
		assert.Equal(t, DefaultMemoryStoreCapacity, s.capacity)
		assert.Equal(t, DefaultMemoryStoreRetention, s.retention)
	})
}
