// The attempts a Consumer remembers of the messages it retried at once
// (modified with delivery-failed): Artemis 2.40 redelivers a large message
// with delivery-count 0 every time, and restarts a message's
// delivery-count when a cluster's redistribution moves it to another
// member, so the count alone would let a failing message get
// max-delivery-attempts deliveries, or maxTries more on every move. A
// cluster Client's Consume shares one memory across its members.

package artemis

import (
	"sync"
	"sync/atomic"
)

// attemptMemoryCap is how many message ids with a failed delivery and no
// final outcome yet a cluster Client's Consume remembers per queue; past
// it the oldest is forgotten (and gets the broker's count only).
const attemptMemoryCap = 1 << 16

// attemptMemory maps a queue and a meta.id to the failed deliveries seen
// so far, for the consume loops a cluster Client runs on every member for
// one queue. The queue is part of the key: a topic's publish reaches
// every subscription queue with one meta.id, and a Consumer used on two of
// them counts each queue's attempts apart.
type attemptMemory struct {
	mu   sync.Mutex
	cap  int
	seen map[attemptKey]remembered
	// order is the ids in the order remembered, each with the stamp it got
	// then: a place whose stamp is not the id's current one (forgotten, or
	// forgotten and remembered again since) is skipped on eviction.
	order []stamped
	next  uint64
	// n is len(seen): a memory with nothing in it (the usual case) costs
	// a delivery an atomic load, not a lock.
	n atomic.Int64
}

// remembered is an id's failed attempts and the stamp of its place in
// order.
type remembered struct {
	attempts int
	stamp    uint64
}

type stamped struct {
	key   attemptKey
	stamp uint64
}

// attemptKey is a message (its meta.id) on one queue.
type attemptKey struct{ queue, id string }

func newAttemptMemory(capacity int) *attemptMemory {
	return &attemptMemory{cap: capacity, seen: map[attemptKey]remembered{}}
}

// live reports whether o is its id's current place in the order.
func (m *attemptMemory) live(o stamped) bool {
	r, ok := m.seen[o.key]
	return ok && r.stamp == o.stamp
}

// reconcile is attempts raised to what was remembered for id on queue. A
// nil memory remembers nothing.
func (m *attemptMemory) reconcile(queue, id string, attempts int) int {
	if m == nil || id == "" || m.n.Load() == 0 {
		return attempts
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(attempts, m.seen[attemptKey{queue, id}].attempts)
}

// failed remembers that id has had attempts failed deliveries on queue.
func (m *attemptMemory) failed(queue, id string, attempts int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := attemptKey{queue, id}
	r, ok := m.seen[key]
	if !ok {
		for len(m.seen) >= m.cap && len(m.order) > 0 {
			oldest := m.order[0]
			m.order = m.order[1:]
			if m.live(oldest) {
				delete(m.seen, oldest.key)
			}
		}
		m.next++
		r.stamp = m.next
		m.order = append(m.order, stamped{key, r.stamp})
	}
	r.attempts = max(r.attempts, attempts)
	m.seen[key] = r
	m.n.Store(int64(len(m.seen)))
}

// forget drops id on queue once its message is settled for good there.
func (m *attemptMemory) forget(queue, id string) {
	if m.n.Load() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := attemptKey{queue, id}
	if _, ok := m.seen[key]; !ok {
		return
	}
	delete(m.seen, key)
	m.n.Store(int64(len(m.seen)))
	if len(m.order) > 2*m.cap {
		// Compact the ids already forgotten.
		kept := m.order[:0]
		for _, o := range m.order {
			if m.live(o) {
				kept = append(kept, o)
			}
		}
		m.order = kept
	}
}
