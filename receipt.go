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
	observed  *publishConfig // its observer hears the outcome (nil: none)
	start     time.Time      // when the publish began, for the observer

	built    bool        // made by a publish: a zero Receipt is not
	waited   atomic.Bool // Wait was called
	resolved atomic.Bool // err is set
	err      error
	// done is closed once err is set. It is made only when a Wait or Done
	// finds the receipt pending (most of a pipeline's are resolved before
	// anyone asks): mu orders its making against the resolution.
	mu   sync.Mutex
	done chan struct{}
}

// closedDone is the Done of a receipt resolved before anyone asked.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// newReceipt is the Receipt of a publish of the message id, of URN urn, to
// queue.
func newReceipt(id, urn, queue string, onOutcome func(id string, err error)) *Receipt {
	return &Receipt{id: id, urn: urn, queue: queue, onOutcome: onOutcome, built: true}
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
	if !r.built {
		return errNotBuilt
	}
	r.waited.Store(true)
	if r.resolved.Load() {
		return r.err
	}
	done := r.doneChan()
	select {
	case <-done:
		return r.err
	default:
	}
	select {
	case <-done:
		return r.err
	case <-ctx.Done():
		return publishError(r.queue, r.urn, ctx.Err())
	}
}

// Done returns a channel that is closed once the outcome is known (Wait then
// returns at once), for a select over many receipts.
func (r *Receipt) Done() <-chan struct{} {
	if !r.built {
		return nil
	}
	return r.doneChan()
}

// doneChan is r's done channel, made now when r is pending and nobody
// asked for it before; closedDone when r was resolved first.
func (r *Receipt) doneChan() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		if r.resolved.Load() {
			return closedDone
		}
		r.done = make(chan struct{})
	}
	return r.done
}

// markResolved tells whoever waits that err is set.
func (r *Receipt) markResolved() {
	r.mu.Lock()
	r.resolved.Store(true)
	if r.done != nil {
		close(r.done)
	}
	r.mu.Unlock()
}

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
	// Deferred, so an Observer that ends the goroutine (runtime.Goexit,
	// which no recover stops) still leaves the receipt resolved, then
	// reported: done closed first, the report after.
	defer r.report(err)
	defer r.markResolved()
	if r.observed != nil {
		// Before done: whoever saw the receipt resolve (Wait, Done) finds
		// it observed too.
		r.observed.observePublish(r.queue, r.urn, r.id, r.start, err)
	}
}

// report tells the WithOnOutcome callback of the outcome, else logs a
// failure nobody waited for.
func (r *Receipt) report(err error) {
	switch {
	case r.onOutcome != nil:
		callOnOutcome(r.onOutcome, r.id, err)
	case err != nil && !r.waited.Load():
		logLine(context.Background(), slog.Default(), slog.LevelWarn, "publish not confirmed, receipt not waited on",
			slog.String("queue", r.queue), slog.String("urn", r.urn), slog.String("message_id", r.id), slog.Any("error", err))
	}
}

// sendPath is the one seam between a Publisher and what it sends through:
// a bare link (linkPath, below), or a Client's reconnecting sender, whose
// own files (client_sender.go, client_receipt.go) hold its rules for a
// lost outcome and its receipts' resolution. A Publisher calls down through
// it and nothing calls back up.
type sendPath interface {
	// send writes msg and returns the broker's outcome.
	send(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error)
	// start writes msg and sees r resolved with its outcome: at once, or
	// later by the path's resolver. An error means nothing was written and
	// r is left alone. kept reports that the path may still read msg (kept
	// for a resend, or under a write that was cut off): it is not reused.
	start(ctx context.Context, msg *amqp.Message, r *Receipt) (kept bool, err error)
	// reuses reports whether a publish may project onto a pooled message
	// (see pooledMessage): the path reads a message only while it is
	// written. dupID tells that the message carries a duplicate id.
	reuses(dupID bool) bool
}

// pathOf is the path of a Publisher over s: s itself when it is one (a
// Client's sender), else s as a bare link; nil for nil.
func pathOf(s Sender) sendPath {
	switch s := s.(type) {
	case nil:
		return nil
	case sendPath:
		return s
	}
	return &linkPath{link: s}
}

// linkPath is the sendPath of a bare link (NewPublisher's Sender): the
// confirmed send of outcome.go, and its receipts resolved in the order
// written by one resolver.
type linkPath struct {
	link     Sender
	receipts resolver
}

func (l *linkPath) send(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	return transfer(ctx, l.link, msg)
}

func (l *linkPath) start(ctx context.Context, msg *amqp.Message, r *Receipt) (bool, error) {
	pt, err := startTransfer(ctx, l.link, msg)
	if err != nil {
		cutBetweenFrames(l.link, err)
		return false, err
	}
	if !pt.pending() {
		r.resolve(pt.state, nil) // the outcome came with the send
		return false, nil
	}
	l.receipts.add(linkReceipt{r: r, pt: pt})
	return false, nil
}

// reuses: an *amqp.Sender reads a message only while it is written (see
// pooledMessage), with or without a duplicate id (nothing is resent).
func (l *linkPath) reuses(bool) bool {
	_, ok := l.link.(*amqp.Sender)
	return ok
}

// outcomeQueue holds the pending outcomes of one link, in the order they
// were written, for the one goroutine that resolves them while any is
// pending. One goroutine for a link keeps the cost per receipt at a slice
// append; the broker settles a link's transfers in order, so waiting in
// order does not hold a settled receipt behind an unsettled one for long.
// That holds within one link only: a link that stops settling (its broker
// stalled, its network half-open) would hold every receipt queued behind
// it. So each link has its own queue: a bare link's (resolver, below), and
// one for each link a ClientPublisher writes on (client_receipt.go), one
// per cluster member and per re-attach, so one link's trouble never delays
// another link's outcomes.
type outcomeQueue[T any] struct {
	mu      sync.Mutex
	queue   []T // pending, in the order written
	spare   []T // the array of the batch before, for the next
	running bool
}

// push queues t and reports whether the caller is to start the goroutine
// (none is running).
func (q *outcomeQueue[T]) push(t T) (start bool) {
	q.mu.Lock()
	q.queue = append(q.queue, t)
	start = !q.running
	q.running = true
	q.mu.Unlock()
	return start
}

// take hands the running goroutine every pending outcome, in order; false
// when there is none, and the goroutine ends.
func (q *outcomeQueue[T]) take() ([]T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.queue
	if len(batch) == 0 {
		q.running = false
		return nil, false
	}
	q.queue = q.spare[:0]
	return batch, true
}

// done gives back the array of a resolved batch, for the next.
func (q *outcomeQueue[T]) done(batch []T) {
	q.mu.Lock()
	q.spare = batch[:0]
	q.mu.Unlock()
}

// requeue puts rest, what a goroutine ended by a callback (runtime.Goexit;
// a panic is recovered in resolve) left of its batch, back at the front:
// a new goroutine carries on, so running stays true and no receipt is left
// behind.
func (q *outcomeQueue[T]) requeue(rest []T) {
	q.mu.Lock()
	q.queue = append(append([]T(nil), rest...), q.queue...)
	q.mu.Unlock()
}

// linkReceipt is a receipt and the transfer on a bare link it waits for.
type linkReceipt struct {
	r  *Receipt
	pt pendingTransfer
}

// resolver resolves a bare link's receipts (see outcomeQueue).
type resolver struct{ outcomeQueue[linkReceipt] }

func (q *resolver) add(lr linkReceipt) {
	if q.push(lr) {
		go q.run()
	}
}

func (q *resolver) run() {
	var batch []linkReceipt
	next := 0 // batch[next:] are still pending
	clean := false
	defer func() {
		if !clean {
			q.requeue(batch[next:])
			go q.run()
		}
	}()
	for {
		var ok bool
		if batch, ok = q.take(); !ok {
			clean = true
			return
		}
		next = 0
		for i, lr := range batch {
			// The wait ends with the outcome, or when the link or connection
			// is gone: go-amqp then fails every pending receipt.
			state, err := lr.pt.wait(context.Background())
			batch[i] = linkReceipt{}
			next = i + 1
			lr.r.resolve(state, err)
		}
		q.done(batch)
	}
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
