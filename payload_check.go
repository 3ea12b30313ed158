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
	data := d.env.Data
	if p, ok := d.c.payload.(PayloadProtector); ok {
		if len(data) == 0 {
			data = emptyData
		}
		restored, uerr := p.UnprotectPayload(d.urn, data)
		if uerr != nil {
			return true, d.undecryptable(uerr)
		}
		if !bytes.Equal(restored, data) {
			// Canonical, as every decoded Envelope.Data is (a protector may
			// hand back another SDK's escapes, or encoding/json's); the
			// error names no piece of the restored data.
			canon, cerr := jsoncodec.CanonicalObject(restored)
			if cerr != nil {
				return true, d.undecryptable(fmt.Errorf("%w: the restored data is not a JSON object", ErrDecrypt))
			}
			restored = canon
			// The handler reads the restored data; every record of the
			// message (a dead-letter copy) keeps it as it travelled.
			cp := *d.env
			cp.Data = restored
			d.restored, data = &cp, restored
		}
	}
	cause := checkPayload(ctx, d.c.payload, d.urn, data)
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
