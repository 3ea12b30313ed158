package artemis

import (
	"sync"

	"github.com/Azure/go-amqp"
)

// DefaultCreditBytes is how many bytes of messages a Client consumer's link
// may hold at once by default: the deliveries its handlers hold plus what
// the broker may still push on the credit granted. With messages of a few
// KB the count credit is what limits (100 messages of 1 KB are 100 KB); with
// messages of a MiB it is this, about 32 of them rather than 100.
const DefaultCreditBytes = 32 << 20

// deliveryOverhead is what a delivery costs beyond its body sections: its
// properties, annotations and the Message itself, counted so that a
// window of tiny messages is still bounded by the count credit.
const deliveryOverhead = 512

// creditWindow grants a consumer link its credit by hand (the link is
// attached with manual credit), so that what the process holds stays
// within a count and a byte budget: the deliveries received and not yet
// settled (held) plus the credit the broker may still use (outstanding),
// each of the latter counted at the size of the largest delivery seen.
// Every settlement makes room; the room is granted again in batches of a
// quarter of the window, so a busy link sends a flow frame for every
// quarter window of settlements, not for each one. One delivery is
// always allowed, however large: a message over the budget is still
// received, alone.
type creditWindow struct {
	mu          sync.Mutex
	issue       func(uint32) error // the link's IssueCredit
	count       int                // most deliveries held or outstanding
	budget      int64              // most bytes held or outstanding
	held        int
	heldBytes   int64
	outstanding int   // credit granted and not yet used by a delivery
	largest     int64 // the largest delivery seen (deliveryOverhead before the first)
	err         error // the first IssueCredit error: the link is gone
}

// newCreditWindow returns the window of a link attached with manual
// credit; issue is its IssueCredit.
func newCreditWindow(issue func(uint32) error, count int, budget int64) *creditWindow {
	return &creditWindow{issue: issue, count: max(count, 1), budget: max(budget, 1), largest: deliveryOverhead}
}

// start grants the first credit: one delivery, whose size opens the
// window (to the count credit for small messages, to what the budget
// allows for large ones), so that not even the first burst outgrows the
// budget. It costs one round trip per attach.
func (w *creditWindow) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.issue(1); err != nil {
		w.err = err
		return err
	}
	w.outstanding = 1
	return nil
}

// received accounts for a delivery taken off the link.
func (w *creditWindow) received(msg *amqp.Message) {
	size := deliverySize(msg)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held++
	w.heldBytes += size
	if w.outstanding > 0 {
		w.outstanding--
	}
	if size > w.largest {
		w.largest = size
	}
	// The first delivery opens the window; a later one may widen it.
	_ = w.grantLocked()
}

// settled accounts for a delivery settled (accepted, released or
// modified) and grants the room it made, in batches.
func (w *creditWindow) settled(msg *amqp.Message) {
	size := deliverySize(msg)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held > 0 {
		w.held--
		w.heldBytes -= size
	}
	_ = w.grantLocked()
}

// room is how much credit may be outstanding now: the count and the byte
// budget less what is held, at the largest size seen, and never less than
// one delivery in all.
func (w *creditWindow) room() int {
	byCount := w.count - w.held
	byBytes := int((w.budget - w.heldBytes) / w.largest)
	r := min(byCount, byBytes)
	if w.held == 0 {
		r = max(r, 1)
	}
	return max(r, 0)
}

// grantLocked issues the credit room allows beyond what is outstanding,
// once it is at least a quarter of the window: one flow frame for many
// settlements, while the deliveries held (at least three quarters of the
// window by then) keep the handlers busy. With nothing held the whole
// window is granted, so the link never stalls.
func (w *creditWindow) grantLocked() error {
	if w.err != nil {
		return w.err
	}
	want := w.room() - w.outstanding
	if want <= 0 {
		return nil
	}
	window := min(w.count, max(int(w.budget/w.largest), 1))
	if want < max(window/4, 1) {
		return nil
	}
	if err := w.issue(uint32(want)); err != nil {
		w.err = err
		return err
	}
	w.outstanding += want
	return nil
}

// deliverySize is the bytes a delivery holds: its body sections and the
// overhead of the rest.
func deliverySize(msg *amqp.Message) int64 {
	if msg == nil {
		return deliveryOverhead
	}
	n := int64(deliveryOverhead)
	for _, d := range msg.Data {
		n += int64(len(d))
	}
	if b, ok := msg.Value.(string); ok {
		n += int64(len(b))
	}
	return n
}
