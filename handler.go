// The handler stage: the call, with panics and goroutine exits turned into
// failed attempts, and a failed attempt's settlement: redelivery below the
// limit, the dead-letter queue at it.

package artemis

import (
	"context"
	"runtime/debug"
)

// call runs the handler and settles the delivery by its result. A panic is
// a failed attempt (a *PanicError); so is a handler that exits its
// goroutine with runtime.Goexit (t.FailNow and require.* in tests do): the
// delivery is settled as failed with ErrHandlerExited on the way out, then
// the goroutine goes on exiting.
//
// The error a handler returns is read once (printable) before the
// settlement: an Error method that panics is replaced by a fixed text, one
// that exits the goroutine settles the failed attempt on the way out under
// that text, so the delivery is settled once with the outcome it had.
func (d *delivery) call(ctx context.Context, h HandlerFunc) (err error) {
	returned := false
	var herr error
	defer func() {
		if returned {
			return // a panic in the settlement itself is not the handler's
		}
		if d.c.observer != nil {
			d.handler = d.c.now().Sub(d.start)
		}
		if p := recover(); p != nil {
			err = d.handlerFailed(&PanicError{Value: p, Stack: debug.Stack()})
			return
		}
		if herr != nil {
			// The handler returned; its error's Error method exited.
			_ = d.handlerFailed(&unprintableError{err: herr, text: unprintableText(herr, "exited its goroutine")})
			return
		}
		_ = d.handlerFailed(ErrHandlerExited)
	}()
	if d.c.observer != nil {
		d.start = d.c.now()
	}
	env := d.env
	if d.restored != nil {
		env = d.restored
	}
	herr = h(ctx, env, d.msg)
	if herr != nil {
		herr = printable(herr)
	}
	returned = true
	if d.c.observer != nil {
		d.handler = d.c.now().Sub(d.start)
	}
	if herr == nil {
		return d.finish(KindNone, nil, DispositionAccepted, d.accept)
	}
	return d.handlerFailed(herr)
}

// handlerFailed settles a failed attempt: a retry by the schedule below the
// limit, dead-letter (or drop without a DLQ sender) at it.
func (d *delivery) handlerFailed(cause error) error {
	// Written as attempts < maxTries-1, not attempts+1 < maxTries: a body
	// attempts of math.MaxInt would overflow and be retried forever.
	if d.attempts < d.c.maxTries-1 {
		return d.retry(cause)
	}
	if d.c.dlq == nil {
		return d.finish(KindHandlerFailed, cause, DispositionDropped, d.accept)
	}
	dl := newDeadLetter(ReasonFailed, cause, d.queue(), d.attempts, d.c.now())
	return d.deadLetter(KindHandlerFailed, cause, deadLetterEnvelope(d.env, dl, d.msg, d.queue()))
}
