// The consume side's payload check (WithPayloadValidator): run before the
// handler; a message whose data fails its schema is dead-lettered at once.

package artemis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/babelqueue/babelqueue-go-artemis/internal/jsoncodec"
)

// checkPayload is the consume side's check, run before the handler. It
// returns true when the delivery was settled here (invalid data, or a
// validator or protector that panicked or exited its goroutine, or a check
// cut short by the end of the consume) with that settlement's result.
// Only the user's code (verdict) runs under the recover: a panic in the
// settlement is not the validator's.
func (d *delivery) checkPayload() (settled bool, err error) {
	d.begin()
	returned := false
	defer func() {
		if !returned {
			// runtime.Goexit in the validator or the protector (t.FailNow
			// in a test's): a failed attempt, as a panic is, settled on
			// the way out; then the goroutine goes on exiting.
			_ = d.handlerFailed(fmt.Errorf("payload validator exited its goroutine: %w", ErrHandlerExited))
		}
	}()
	undecryptable, cause, fault := d.verdict()
	returned = true
	switch {
	case fault != nil:
		return true, d.handlerFailed(fault)
	case undecryptable != nil:
		return true, d.undecryptable(undecryptable)
	case cause == nil:
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

// verdict runs the user's code on the delivery's data: the protector's
// restore (undecryptable: why it failed), then the validator (cause: a
// *PayloadError, ctx's error or nil). A panic there is fault, a failed
// attempt. checkPayload reads a validator's error text here, under the
// recover; a protector's is read by printable.
func (d *delivery) verdict() (undecryptable, cause, fault error) {
	defer func() {
		if p := recover(); p != nil {
			fault = &PanicError{Value: fmt.Errorf("payload validator panicked: %v", p), Stack: debug.Stack()}
		}
	}()
	ctx := d.checkCtx()
	data := d.env.Data
	if p, ok := d.c.payload.(PayloadProtector); ok {
		if len(data) == 0 {
			data = emptyData
		}
		restored, uerr := p.UnprotectPayload(d.urn, data)
		if uerr != nil {
			return printable(uerr), nil, nil
		}
		if !bytes.Equal(restored, data) {
			// Canonical, as every decoded Envelope.Data is (a protector may
			// hand back another SDK's escapes, or encoding/json's); the
			// error names no piece of the restored data.
			canon, cerr := jsoncodec.CanonicalObject(restored)
			if cerr != nil {
				return fmt.Errorf("%w: the restored data is not a JSON object", ErrDecrypt), nil, nil
			}
			restored = canon
			// The handler reads the restored data; every record of the
			// message (a dead-letter copy) keeps it as it travelled.
			cp := *d.env
			cp.Data = restored
			d.restored, data = &cp, restored
		}
	}
	return nil, checkPayload(ctx, d.c.payload, d.urn, data), nil
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

// undecryptable settles a message whose protected data could not be
// restored, as invalidPayload does (it will not decrypt on a later try),
// reported as KindDecryptFailed.
func (d *delivery) undecryptable(cause error) error {
	if !errors.Is(cause, ErrDecrypt) {
		cause = fmt.Errorf("%w: %w", ErrDecrypt, cause)
	}
	if d.c.unknown == UnknownURNDelete || d.c.dlq == nil {
		return d.finish(KindDecryptFailed, cause, DispositionDropped, d.accept)
	}
	dl := newDeadLetter(ReasonFailed, cause, d.queue(), d.attempts, d.c.now())
	return d.deadLetter(KindDecryptFailed, cause, deadLetterEnvelope(d.env, dl, d.msg, d.queue()))
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
