// The consume side's payload check (WithPayloadValidator): run before the
// handler; a message whose data fails its schema is dead-lettered at once.

package artemis

import (
	"context"
	"fmt"
	"runtime/debug"
)

// checkPayload is the consume side's check, run before the handler. It
// returns true when the delivery was settled here (invalid data, or a
// panic in the validator, or a check cut short by the end of the consume)
// with that settlement's result.
func (d *delivery) checkPayload() (settled bool, err error) {
	d.begin()
	defer func() {
		if p := recover(); p != nil {
			settled, err = true, d.handlerFailed(&PanicError{Value: fmt.Errorf("payload validator panicked: %v", p), Stack: debug.Stack()})
		}
	}()
	ctx := d.checkCtx()
	cause := checkPayload(ctx, d.c.payload, d.urn, d.env.Data)
	if cause == nil {
		return false, nil
	}
	if _, invalid := cause.(*PayloadError); !invalid {
		// ctx's error: the consume ended before or during the check. The
		// message was not handled, and goes back to the broker as it came,
		// without a report (the observer hears of it).
		d.quiet = true
		return true, d.finish(KindGivenBack, nil, DispositionReleased, d.release)
	}
	return true, d.invalidPayload(cause)
}

// checkCtx is the check's context: it ends when the consume does (d.stop:
// Handle's context, or Listen's context and its lost link), while the
// handler's context under Listen does not (a handler in flight finishes).
func (d *delivery) checkCtx() context.Context {
	if d.stop == nil || d.stop == d.ctx.Done() {
		return d.ctx
	}
	return stopContext{Context: d.ctx, stop: d.stop}
}

// stopContext is a context whose end is a channel's close; its values and
// deadline are its parent's.
type stopContext struct {
	context.Context
	stop <-chan struct{}
}

func (c stopContext) Done() <-chan struct{} { return c.stop }

func (c stopContext) Err() error {
	select {
	case <-c.stop:
		return context.Canceled
	default:
		return c.Context.Err()
	}
}

// invalidPayload settles a message whose data failed its schema: a copy
// with reason failed on the DLQ at once, or dropped (no DLQ sender, or
// UnknownURNDelete). Either way it is reported.
func (d *delivery) invalidPayload(cause error) error {
	if d.c.unknown == UnknownURNDelete || d.c.dlq == nil {
		return d.finish(KindInvalidPayload, cause, DispositionDropped, d.accept)
	}
	dl := newDeadLetter(ReasonFailed, cause, d.queue(), d.attempts, d.c.now())
	return d.deadLetter(KindInvalidPayload, cause, deadLetterEnvelope(d.env, dl, d.msg, d.queue()))
}
