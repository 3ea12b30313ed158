// The consume side's payload check (WithPayloadValidator): run before the
// handler; a message whose data fails its schema is dead-lettered at once.

package artemis

import (
	"bytes"
	"errors"
	"fmt"
	"runtime/debug"
)

// checkPayload is the consume side's check, run before the handler. It
// returns true when the delivery was settled here (invalid data, or a
// panic in the validator) with that settlement's result.
func (d *delivery) checkPayload() (settled bool, err error) {
	d.begin()
	defer func() {
		if p := recover(); p != nil {
			settled, err = true, d.handlerFailed(&PanicError{Value: fmt.Errorf("payload validator panicked: %v", p), Stack: debug.Stack()})
		}
	}()
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
			// The handler reads the restored data; every record of the
			// message (a dead-letter copy) keeps it as it travelled.
			cp := *d.env
			cp.Data = restored
			d.restored, data = &cp, restored
		}
	}
	cause := checkPayload(d.c.payload, d.urn, data)
	if cause == nil {
		return false, nil
	}
	return true, d.invalidPayload(cause)
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
