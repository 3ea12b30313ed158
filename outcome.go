// The confirmed send: a transfer counts only when the broker's outcome is
// accepted. Publish and every dead-letter write go through it.

package artemis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
)

// sendConfirmed sends msg and succeeds only when the broker's outcome is
// accepted. go-amqp's Send returns nil for released and modified outcomes,
// so those are read from the receipt and turned into an *OutcomeError.
func sendConfirmed(ctx context.Context, s Sender, msg *amqp.Message) error {
	state, err := transfer(ctx, s, msg)
	if err != nil {
		return err
	}
	return outcomeError(state)
}

// transfer sends msg and waits for the broker's outcome: from an
// outcomeSender, or from the receipt of an *amqp.Sender. A Sender that is
// neither is trusted when Send returns nil (reported as accepted).
func transfer(ctx context.Context, s Sender, msg *amqp.Message) (amqp.DeliveryState, error) {
	if os, ok := s.(outcomeSender); ok {
		state, err := os.SendOutcome(ctx, msg)
		return state, creditTimeout(ctx, err)
	}
	p, err := startTransfer(ctx, s, msg)
	if err != nil {
		cutBetweenFrames(s, err)
		return nil, err
	}
	return p.wait(ctx)
}

// pendingTransfer is a transfer that was written and whose outcome is still
// to come (or, from a Sender that only answers synchronously, already came).
type pendingTransfer struct {
	receipt    amqp.SendReceipt // from an *amqp.Sender, when hasReceipt
	hasReceipt bool
	// later waits for the outcome from a pendingSender; it may be called
	// again after its ctx ended.
	later func(context.Context) (amqp.DeliveryState, error)
	state amqp.DeliveryState // the outcome known at once, else nil
}

// pending reports a transfer whose outcome is still to be awaited.
func (p *pendingTransfer) pending() bool {
	return p.hasReceipt || p.later != nil
}

// wait returns the outcome. It may be called again after ctx ended; once it
// returned an outcome it returns that outcome. Not safe for concurrent use:
// one goroutine waits.
func (p *pendingTransfer) wait(ctx context.Context) (amqp.DeliveryState, error) {
	switch {
	case p.hasReceipt:
		return p.receipt.Wait(ctx)
	case p.later != nil:
		return p.later(ctx)
	}
	return p.state, nil
}

// startTransfer writes msg and returns its pending outcome; an error means
// the transfer was not written (or, from a Sender that answers
// synchronously, failed). An *amqp.Sender returns once the transfer is
// written, blocking while the link has no credit: so the transfers in flight
// are bounded by the credit the broker gives. An outcomeSender or a plain
// Sender is waited on here, and the outcome is known when this returns.
func startTransfer(ctx context.Context, s Sender, msg *amqp.Message) (pendingTransfer, error) {
	switch s := s.(type) {
	case pendingSender:
		return s.startOutcome(ctx, msg)
	case outcomeSender:
		state, err := s.SendOutcome(ctx, msg)
		if err != nil {
			return pendingTransfer{}, creditTimeout(ctx, err)
		}
		return pendingTransfer{state: state}, nil
	case receiptSender:
		h := &handoffContext{Context: ctx}
		receipt, err := s.SendWithReceipt(h, msg, nil)
		if err != nil {
			if h.wrote.Load() && neverSent(err) && writesFrames(s) {
				err = fmt.Errorf("%w; %w", err, errTransferCut) // see cutBetweenFrames
			}
			return pendingTransfer{}, creditTimeout(ctx, err)
		}
		return pendingTransfer{receipt: receipt, hasReceipt: true}, nil
	}
	if err := s.Send(ctx, msg, nil); err != nil {
		return pendingTransfer{}, creditTimeout(ctx, err)
	}
	return pendingTransfer{state: &amqp.StateAccepted{}}, nil
}

// handoffContext is the context go-amqp's SendWithReceipt gets: its Done is
// the caller's, so a transfer still waiting for link credit ends with the
// caller's context (nothing was written: neverSent), but it reports neither
// a deadline nor an error. go-amqp (v1.7.0) numbers a transfer when the
// session takes it and then drops the frame if its context has ended by the
// time the connection's writer reads the context's Err and Deadline; the
// broker then sees a gap in the delivery ids and closes the whole
// connection ("Expected delivery-id N, got N+1"), failing every other
// transfer on it. So once a transfer is handed over, the caller's deadline
// no longer cuts its write: go-amqp's write timeout bounds it, and the
// caller's context bounds only the wait for the outcome (receipt.Wait).
//
// A message larger than the peer's maximum frame size is written in
// several frames; go-amqp waits on Done before handing over each of them,
// so a caller's context that ends in the middle of such a write still
// leaves it unfinished (see cutBetweenFrames). wrote tells that it did
// start: go-amqp's connection writer reads Err, then Deadline, of a
// frame's context just before it writes the frame (conn.go,
// getWriteTimeout), and nothing else of go-amqp calls either.
type handoffContext struct {
	context.Context
	wrote atomic.Bool // a frame of the transfer was written
}

func (h *handoffContext) Deadline() (time.Time, bool) {
	h.wrote.Store(true)
	return time.Time{}, false
}

func (*handoffContext) Err() error { return nil }

// cutBetweenFrames detaches s, in the background and bounded by
// cutDetachTimeout, when err is a transfer cut between its frames
// (errTransferCut): go-amqp (v1.7.0) reported it as never handed over
// (neverSent: amqp:link:transfer-limit-exceeded) while frames of it were
// written, as its context ended between two frames of a message larger
// than one. go-amqp (sender.go, Sender.send) returns the very error of a
// transfer cut before its first frame, and leaves the delivery open on the
// link: its frames went out with more=true, and no final one. The next
// transfer on that link would be a new delivery-id while that one is
// incomplete: a broker takes the link's deliveries in order (Artemis waits
// on the incomplete one, and every later transfer of the link with it), so
// the link is detached: nothing more can be written on it. This is for a
// Sender of the caller's own (a bare Publisher's, a dead-letter sender):
// a Client's link is detached by senderLink.closeWhenSettled instead,
// once the outcomes written before the cut came.
//
// The message was not stored, so the publish is reported as never sent
// (err still is neverSent, and not ErrOutcomeUnknown): the final frame
// (more=false) was never handed over, as go-amqp waits on ctx only before a
// frame's hand-over, and a delivery is a message only once its last frame
// came. AMQP 1.0 (2.6.14, and transfer's "aborted" field in 2.7.5) has a
// sender end such a delivery with aborted=true, which the receiver
// discards, settled, without ever having a message; go-amqp has no way to
// send it, and a detach (closed) ends the link with the delivery still
// incomplete: the broker discards it the same way (Artemis drops the
// incomplete delivery of a closed link), and never stores it.
func cutBetweenFrames(s Sender, err error) {
	if !errors.Is(err, errTransferCut) {
		return
	}
	if c, ok := s.(detachable); ok {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), cutDetachTimeout)
			defer cancel()
			_ = c.Close(ctx)
		}()
	}
}

// writesFrames reports a link whose transfers the cut detection
// (handoffContext.wrote) can be trusted for: go-amqp's own Sender, whose
// connection writer alone reads a transfer's context Deadline, just before
// each frame (a wrapper of the caller's own may read it itself, as
// context.WithTimeout does, and say nothing of what was written), or a
// test's link that declares it writes frames the same way.
func writesFrames(s receiptSender) bool {
	switch s.(type) {
	case *amqp.Sender, framesWriter:
		return true
	}
	return false
}

// framesWriter is a test's link that reads a transfer's context Deadline
// only when it writes a frame, as go-amqp's connection writer does.
type framesWriter interface{ writesFramesAsGoAMQP() }

// cutDetachTimeout bounds the detach of a link left with an incomplete
// delivery (cutBetweenFrames).
const cutDetachTimeout = 5 * time.Second

// creditTimeout is err, and ctx's error with it when err is go-amqp's
// answer to a transfer whose ctx ended while it waited for link credit
// (amqp:link:transfer-limit-exceeded; Artemis grants none to a link on a
// full address): the caller's deadline ended the call, so the error
// matches context.DeadlineExceeded (or context.Canceled) as well as the
// *amqp.Error. The transfer was never written (see neverSent).
func creditTimeout(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || isContextError(err) || !neverSent(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ctx.Err(), err)
}

// neverSent reports go-amqp's error for a transfer that was not handed
// over to the link: its ctx ended while it waited for credit.
func neverSent(err error) bool {
	if err == nil {
		return false // before errors.As, whose target escapes: no allocation on success
	}
	var ae *amqp.Error
	return !linkLost(err) && errors.As(err, &ae) && ae.Condition == amqp.ErrCondTransferLimitExceeded
}

// outcomeError maps a broker outcome to nil (accepted) or an *OutcomeError.
func outcomeError(state amqp.DeliveryState) error {
	if _, ok := state.(*amqp.StateAccepted); ok {
		return nil
	}
	return &OutcomeError{State: state}
}

// pendingSender is a link that writes a transfer and hands back its
// outcome to be awaited later, as an *amqp.Sender's SendWithReceipt does.
// The unit tests' pipelining links implement it (go-amqp's SendReceipt
// cannot be made outside go-amqp); no library type does: a Client's sender
// is a sendPath (receipt.go), not a link.
type pendingSender interface {
	startOutcome(ctx context.Context, msg *amqp.Message) (pendingTransfer, error)
}

// expiry is a deadline a resolver reuses from one receipt to the next: one
// timer, re-armed for each wait and stopped after it, and a new one (with
// its channel) only after it fired, which a broker that settles never
// lets it do. A context.WithTimeout per receipt would allocate a context
// and a timer for every message. One goroutine uses it at a time.
type expiry struct {
	t     *time.Timer   // nil, or stopped before it fired
	done  chan struct{} // closed by t when it fires
	armed bool          // started and not stopped
}

// start arms the timer for d and returns a context that is done when it
// fires. A timer left armed by a start without its stop (a wait that exited
// its goroutine) is not re-armed, as it may fire on its own: a new one is
// made.
func (e *expiry) start(d time.Duration) expiryContext {
	if e.armed {
		e.t = nil
	}
	e.armed = true
	if e.t == nil {
		done := make(chan struct{})
		e.done = done
		e.t = time.AfterFunc(d, func() { close(done) })
	} else {
		e.t.Reset(d)
	}
	return expiryContext{e.done}
}

// stop disarms the timer and reports whether it had fired; a timer that
// fired is not used again (its channel is closed).
func (e *expiry) stop() (fired bool) {
	e.armed = false
	if e.t == nil {
		return false
	}
	if e.t.Stop() {
		return false
	}
	e.t = nil
	return true
}

// expiryContext is the context of a wait under an expiry. A struct of one
// channel: as a context.Context it allocates nothing.
type expiryContext struct{ done <-chan struct{} }

func (expiryContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c expiryContext) Done() <-chan struct{}     { return c.done }
func (expiryContext) Value(any) any               { return nil }

func (c expiryContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
