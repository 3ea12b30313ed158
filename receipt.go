// Pipelined publishing: PublishWithReceipt writes a transfer and returns a
// Receipt; the broker's outcome is awaited later.

package artemis

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
)

// Receipt is the pending outcome of one transfer written by
// PublishWithReceipt. Its methods are safe for concurrent use.
type Receipt struct {
	id        string
	urn       string
	queue     string
	onOutcome func(id string, err error)
	pending   pendingTransfer // waited on by the Publisher's resolver only
	observed  *publishConfig  // its observer hears the outcome (nil: none)
	start     time.Time       // when the publish began, for the observer

	waited atomic.Bool   // Wait was called
	done   chan struct{} // closed once err is set
	err    error
}

// ID returns the envelope's meta.id, known as soon as the transfer is
// written.
func (r *Receipt) ID() string { return r.id }

// Wait blocks until the broker's outcome of the transfer is known, or ctx
// ends. It returns nil only when the broker accepted the transfer; a
// rejected, released or modified outcome is an error matching
// ErrNotAccepted, a link or connection lost before the outcome came is
// that error (from a ClientPublisher: matching ErrOutcomeUnknown), as
// Publish returns them. When ctx ends first, Wait returns ctx's error and
// the receipt stays pending: Wait may be called again, and the outcome is
// still reported (see PublishWithReceipt). Once resolved, every Wait
// returns the same result.
func (r *Receipt) Wait(ctx context.Context) error {
	if r.done == nil {
		return errNotBuilt
	}
	r.waited.Store(true)
	select {
	case <-r.done:
		return r.err
	default:
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return publishError(r.queue, r.urn, ctx.Err())
	}
}

// Done returns a channel that is closed once the outcome is known (Wait then
// returns at once), for a select over many receipts.
func (r *Receipt) Done() <-chan struct{} { return r.done }

// resolve records the outcome and reports it: to the WithOnOutcome
// callback, else a failure nobody is waiting for goes to slog.Default().
func (r *Receipt) resolve(state amqp.DeliveryState, err error) {
	if err == nil {
		err = outcomeError(state)
	}
	if err != nil {
		err = publishError(r.queue, r.urn, err)
	}
	r.err = err
	if r.observed != nil {
		// Before done: whoever saw the receipt resolve (Wait, Done) finds
		// it observed too.
		r.observed.observePublish(r.queue, r.urn, r.id, r.start, err)
	}
	close(r.done)
	switch {
	case r.onOutcome != nil:
		callOnOutcome(r.onOutcome, r.id, err)
	case err != nil && !r.waited.Load():
		slog.Default().Warn("publish not confirmed, receipt not waited on",
			"queue", r.queue, "urn", r.urn, "message_id", r.id, "error", err)
	}
}

// resolver waits for the outcomes of the pending receipts of one link, in
// the order they were written, on one goroutine that runs while any is
// pending. One goroutine for a link keeps the cost per receipt at a slice
// append; the broker settles a link's transfers in order, so waiting in
// order does not hold a settled receipt behind an unsettled one for long.
// That holds within one link only: a link that stops settling (its broker
// stalled, its network half-open) would hold every receipt queued behind
// it. So each link has its own resolver: a Publisher's for its Sender's
// link, and a link of its own for each link a ClientPublisher writes on
// (ownResolver), one per cluster member and per re-attach, so one link's
// trouble never delays another link's outcomes.
type resolver struct {
	mu      sync.Mutex
	queue   []*Receipt // pending, in the order written
	spare   []*Receipt // the array of the batch before, for the next
	running bool
	exp     expiry // the deadline of a ClientPublisher's receipt; only the running goroutine uses it
}

func (q *resolver) add(r *Receipt) {
	q.mu.Lock()
	q.queue = append(q.queue, r)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

func (q *resolver) run() {
	var batch []*Receipt
	next := 0 // batch[next:] are still pending
	clean := false
	defer func() {
		if clean {
			return
		}
		// A callback ended the goroutine (runtime.Goexit; a panic is
		// recovered in resolve): the rest of the batch goes back to the
		// front of the queue, and a new goroutine carries on, so running
		// stays true and no receipt is left behind.
		q.mu.Lock()
		q.queue = append(append([]*Receipt(nil), batch[next:]...), q.queue...)
		q.mu.Unlock()
		go q.run()
	}()
	for {
		q.mu.Lock()
		batch, next = q.queue, 0
		if len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			clean = true
			return
		}
		q.queue = q.spare[:0]
		q.mu.Unlock()
		for i, r := range batch {
			// The wait ends with the outcome, or when the link or connection
			// is gone: go-amqp then fails every pending receipt.
			state, err := r.pending.await(&q.exp)
			r.pending = pendingTransfer{}
			batch[i] = nil
			next = i + 1
			r.resolve(state, err)
		}
		q.mu.Lock()
		q.spare = batch[:0]
		q.mu.Unlock()
	}
}

// ownResolver is the owner of a transfer (outcomeOwner) that has a
// resolver of its own for the receipts of the transfers it wrote.
type ownResolver interface {
	receipts() *resolver
}

// callOnOutcome calls a WithOnOutcome callback (nil: none), recovering
// and logging a panic: the callback runs on the caller's goroutine or on a
// Publisher's resolver, and neither may die of it.
func callOnOutcome(f func(id string, err error), id string, err error) {
	if f == nil {
		return
	}
	defer recoverHook(nil, "outcome callback panicked")
	f(id, err)
}

// isRefusal reports an error about the input (the envelope or an option),
// returned as it is rather than as a failed publish.
func isRefusal(err error) bool {
	return errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrInvalidEnvelope) || errors.Is(err, ErrInvalidPayload)
}
