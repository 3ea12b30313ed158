package artemis

import (
	"container/list"
	"context"
	"strconv"
	"sync"
	"time"
)

// Defaults of the in-memory store.
const (
	DefaultMemoryStoreCapacity  = 100_000
	DefaultMemoryStoreRetention = 24 * time.Hour
)

// MemoryStore is the in-memory IdempotencyStore: for one process, bounded,
// safe for concurrent use. It remembers a done id for its retention
// (default DefaultMemoryStoreRetention) and at most its capacity of ids
// (default DefaultMemoryStoreCapacity); when full it forgets the oldest
// done id first, and it never evicts a live claim. A duplicate delivered
// after its id was forgotten runs again. Its memory dies with the process:
// for exactly-once effects across restarts or several consumers, use a
// store they share (an IdempotencyStore on your database), or the
// PostgreSQL module's inbox, which records the id in the handler's own
// transaction.
type MemoryStore struct {
	mu        sync.Mutex
	entries   map[string]*memoryEntry
	done      list.List // *memoryEntry, oldest done first
	claims    list.List // *memoryEntry, oldest claim first
	capacity  int
	retention time.Duration
	seq       uint64
	now       func() time.Time // time.Now; a test's own clock
}

type memoryEntry struct {
	id       string
	claimed  bool      // claimed, else done
	token    string    // the holder's, when claimed
	wasDone  bool      // a replay's claim: the id was done before it
	deadline time.Time // the lease's end when claimed, the retention's when done
	elem     *list.Element
	ended    chan struct{} // closed when the claim ends
}

// MemoryStoreOption configures NewMemoryStore.
type MemoryStoreOption func(*MemoryStore)

// WithMemoryCapacity sets how many ids the store holds at most. A value
// < 1 keeps the default. Default: DefaultMemoryStoreCapacity (100 000).
func WithMemoryCapacity(n int) MemoryStoreOption {
	return func(s *MemoryStore) {
		if n >= 1 {
			s.capacity = n
		}
	}
}

// WithMemoryRetention sets how long a done id is remembered. A value <= 0
// keeps the default. Default: DefaultMemoryStoreRetention (24h).
func WithMemoryRetention(d time.Duration) MemoryStoreOption {
	return func(s *MemoryStore) {
		if d > 0 {
			s.retention = d
		}
	}
}

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore(opts ...MemoryStoreOption) *MemoryStore {
	s := &MemoryStore{
		entries:   make(map[string]*memoryEntry),
		capacity:  DefaultMemoryStoreCapacity,
		retention: DefaultMemoryStoreRetention,
		now:       time.Now,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Claim claims id as IdempotencyStore says. It never fails.
func (s *MemoryStore) Claim(_ context.Context, id string, lease time.Duration, replay bool) (Claim, error) {
	c, _ := s.claim(id, lease, replay)
	return c, nil
}

// claim is Claim, and for a busy id a channel closed when the live claim
// ends, so a waiting delivery wakes at once.
func (s *MemoryStore) claim(id string, lease time.Duration, replay bool) (Claim, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	e := s.entries[id]
	if e != nil && e.claimed && !now.Before(e.deadline) {
		s.claims.Remove(e.elem)
		s.endClaim(e, now)
		e = s.entries[id]
	}
	switch {
	case e == nil:
		e = &memoryEntry{id: id}
		s.entries[id] = e
	case e.claimed:
		return Claim{ID: id, Status: ClaimBusy}, e.ended
	case !replay:
		return Claim{ID: id, Status: ClaimDone}, nil
	default:
		s.done.Remove(e.elem)
		e.wasDone = true
	}
	s.seq++
	e.claimed = true
	e.token = strconv.FormatUint(s.seq, 10)
	e.deadline = now.Add(lease)
	e.ended = make(chan struct{})
	e.elem = s.claims.PushBack(e)
	s.evict()
	return Claim{ID: id, Status: ClaimAcquired, Token: e.token}, nil
}

// Complete marks c's id done. It never fails.
func (s *MemoryStore) Complete(_ context.Context, c Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.entries[c.ID]
	switch {
	case e == nil:
		e = &memoryEntry{id: c.ID}
		s.entries[c.ID] = e
	case e.claimed:
		s.claims.Remove(e.elem)
		close(e.ended)
	default:
		s.done.Remove(e.elem)
	}
	s.markDone(e, now)
	s.sweep(now)
	s.evict()
	return nil
}

// Release gives up c when it still holds its id. It never fails.
func (s *MemoryStore) Release(_ context.Context, c Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[c.ID]
	if e == nil || !e.claimed || e.token != c.Token {
		return nil
	}
	s.claims.Remove(e.elem)
	s.endClaim(e, s.now())
	return nil
}

// Forget removes id. It never fails.
func (s *MemoryStore) Forget(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	if e == nil {
		return nil
	}
	if e.claimed {
		s.claims.Remove(e.elem)
		close(e.ended)
	} else {
		s.done.Remove(e.elem)
	}
	delete(s.entries, id)
	return nil
}

// Len returns how many ids the store holds, done or claimed.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// endClaim ends e's claim, already out of the claims list: e goes back to
// done when a replay claimed a done id, else it is removed.
func (s *MemoryStore) endClaim(e *memoryEntry, now time.Time) {
	close(e.ended)
	if e.wasDone {
		s.markDone(e, now)
		return
	}
	delete(s.entries, e.id)
}

// markDone makes e, in no list, done from now.
func (s *MemoryStore) markDone(e *memoryEntry, now time.Time) {
	e.claimed, e.wasDone, e.token, e.ended = false, false, "", nil
	e.deadline = now.Add(s.retention)
	e.elem = s.done.PushBack(e)
}

// sweep drops the done ids past their retention and ends the claims past
// their lease, oldest first. Leases may differ, so an expired claim behind
// a live one waits for its turn (or for its id's next Claim).
func (s *MemoryStore) sweep(now time.Time) {
	for f := s.done.Front(); f != nil; f = s.done.Front() {
		e := f.Value.(*memoryEntry)
		if now.Before(e.deadline) {
			break
		}
		s.done.Remove(f)
		delete(s.entries, e.id)
	}
	for f := s.claims.Front(); f != nil; f = s.claims.Front() {
		e := f.Value.(*memoryEntry)
		if now.Before(e.deadline) {
			break
		}
		s.claims.Remove(f)
		s.endClaim(e, now)
	}
}

// evict forgets the oldest done ids while the store is over its capacity.
func (s *MemoryStore) evict() {
	for len(s.entries) > s.capacity {
		f := s.done.Front()
		if f == nil {
			return // only live claims: bounded by the handlers running
		}
		s.done.Remove(f)
		delete(s.entries, f.Value.(*memoryEntry).id)
	}
}
