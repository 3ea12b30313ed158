package artemis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/Azure/go-amqp"
)

// delivery is one message on its way to exactly one disposition.
type delivery struct {
	c        *Consumer
	r        Receiver
	msg      *amqp.Message
	ctx      context.Context
	stop     <-chan struct{}
	lost     func(error) // hears of a failed settlement (Listen's loop)
	env      *Envelope
	urn      string
	attempts int
}

var failedAttempt = &amqp.ModifyMessageOptions{DeliveryFailed: true}

// settleCtx is the handler's context without its cancellation: a
// disposition is sent even after the handler's context ended. A context
// that can never be cancelled (Listen's, context.Background) is used as it
// is, which spares an allocation per settlement.
func (d *delivery) settleCtx() context.Context {
	if d.ctx.Done() == nil {
		return d.ctx
	}
	return context.WithoutCancel(d.ctx)
}

func (d *delivery) accept() error { return d.r.AcceptMessage(d.settleCtx(), d.msg) }

// abandon is modified with delivery-failed: Artemis redelivers the message
// and increments its delivery count.
func (d *delivery) abandon() error { return d.r.ModifyMessage(d.settleCtx(), d.msg, failedAttempt) }

// release is a plain release: Artemis redelivers without counting.
func (d *delivery) release() error { return d.r.ReleaseMessage(d.settleCtx(), d.msg) }

// handlerFailed settles a failed attempt: redelivery below the limit,
// dead-letter (or drop without a DLQ sender) at it.
func (d *delivery) handlerFailed(cause error) error {
	// Written as attempts < maxTries-1, not attempts+1 < maxTries: a body
	// attempts of math.MaxInt would overflow and be retried forever.
	if d.attempts < d.c.maxTries-1 {
		return d.finish(ErrHandlerFailed, cause, Abandoned, d.abandon)
	}
	if d.c.dlq == nil {
		return d.finish(ErrHandlerFailed, cause, Dropped, d.accept)
	}
	dl := newDeadLetter(ReasonFailed, cause, d.queue(), d.attempts, d.c.now())
	return d.deadLetter(ErrHandlerFailed, cause, deadLetterEnvelope(d.env, dl, d.msg, d.queue()))
}

func (d *delivery) unknownURN() error {
	switch d.c.unknown {
	case UnknownURNRelease:
		return d.finish(nil, nil, Abandoned, d.abandon)
	case UnknownURNDelete:
		return d.finish(nil, nil, Dropped, d.accept)
	}
	// Only the strategies that report need the cause.
	cause := errors.New("no handler is registered for " + strconv.Quote(d.urn))
	switch d.c.unknown {
	case UnknownURNDeadLetter:
		if d.c.dlq == nil {
			return d.finish(ErrUnknownURN, cause, Dropped, d.accept)
		}
		dl := newDeadLetter(ReasonUnknownURN, nil, d.queue(), d.attempts, d.c.now())
		text := cause.Error()
		dl.Error = &text
		return d.deadLetter(ErrUnknownURN, cause, deadLetterEnvelope(d.env, dl, d.msg, d.queue()))
	}
	return d.finish(ErrUnknownURN, cause, Abandoned, d.abandon)
}

// gated settles a message whose bq_schema_version is not "1" on its first
// delivery: forwarded to the DLQ as received, or dropped.
func (d *delivery) gated(cause error) error {
	if d.c.unknown == UnknownURNDelete || d.c.dlq == nil {
		return d.finish(ErrVersionGated, cause, Dropped, d.accept)
	}
	return d.deadLetter(ErrVersionGated, cause, forwardCopy(d.msg, d.queue()))
}

// poison settles a body that is not a valid envelope: a poison record on
// the DLQ, or dropped. It is never retried.
func (d *delivery) poison(body string, cause error) error {
	if d.c.unknown == UnknownURNDelete || d.c.dlq == nil {
		return d.finish(ErrPoison, cause, Dropped, d.accept)
	}
	dl := newDeadLetter(ReasonPoison, cause, d.queue(), d.attempts, d.c.now())
	dl.Exception = nil
	return d.deadLetter(ErrPoison, cause, poisonMessage(d.msg, poisonRecord(body, dl), d.queue()))
}

// deadLetter writes dlqMsg and accepts the source only once the broker
// accepted the copy. A failed write is reported, the source is held for the
// retry delay and then plainly released, so it is never lost and does not
// count toward Artemis's max-delivery-attempts.
func (d *delivery) deadLetter(kind, cause error, dlqMsg *amqp.Message) error {
	ctx, cancel := context.WithTimeout(d.settleCtx(), d.c.dlqTimeout)
	err := sendConfirmed(ctx, d.c.dlq, dlqMsg)
	cancel()
	if err == nil {
		return d.finish(kind, cause, DeadLettered, d.accept)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Not only ctx.Err() itself: a transfer still waiting for link
		// credit when the time runs out (Artemis grants none to a link on a
		// full address) comes back from go-amqp as its own
		// amqp:link:transfer-limit-exceeded error.
		err = fmt.Errorf("no outcome within %v: %w", d.c.dlqTimeout, err)
	}
	dlqErr := fmt.Errorf("%w (dead-lettering after: %w)", err, cause)
	return d.finish(ErrDeadLetterFailed, dlqErr, Released, func() error {
		d.wait(d.c.retryDelay)
		return d.release()
	})
}

// wait holds the delivery for dur, cut short when the consumer stops.
func (d *delivery) wait(dur time.Duration) {
	if dur <= 0 {
		return
	}
	select {
	case <-d.c.after(dur):
	case <-d.stop:
	}
}

func (d *delivery) queue() string { return d.c.queueName(d.r) }

// finish settles with settle, then reports kind (when non-nil) with the
// disposition that was really sent, and a failed settlement on its own.
// The report for a dead-letter failure goes out before the hold, so the
// callback hears of it at once.
func (d *delivery) finish(kind, cause error, disp Disposition, settle func() error) error {
	var reported *DeliveryError
	reportFirst := errors.Is(kind, ErrDeadLetterFailed)
	if kind != nil {
		reported = d.deliveryError(kind, cause, disp)
		if reportFirst {
			d.c.report(d.ctx, reported, d.env, d.msg)
			d.log(slog.LevelError, reported)
		}
	}
	serr := settle()
	if serr != nil {
		if d.lost != nil {
			// First, so Listen starts nothing more on a dead link while
			// this delivery is still being reported.
			d.lost(serr)
		}
		settleErr := d.deliveryError(ErrSettlement, serr, Pending)
		if reported != nil && !reportFirst {
			reported.Disposition = Pending
			d.c.report(d.ctx, reported, d.env, d.msg)
		}
		d.c.report(d.ctx, settleErr, d.env, d.msg)
		d.log(slog.LevelError, settleErr)
		if reported != nil {
			return fmt.Errorf("%w; %w", reported, settleErr)
		}
		return settleErr
	}
	if reported == nil {
		d.logSettled(disp)
		return nil
	}
	if !reportFirst {
		d.c.report(d.ctx, reported, d.env, d.msg)
		level := slog.LevelWarn
		if disp == Dropped {
			level = slog.LevelError
		}
		d.log(level, reported)
	}
	return reported
}

func (d *delivery) deliveryError(kind, cause error, disp Disposition) *DeliveryError {
	e := &DeliveryError{Kind: kind, URN: d.urn, Attempts: d.attempts, Disposition: disp, Err: cause}
	if d.env != nil {
		e.MessageID = d.env.Meta.ID
	}
	return e
}

func (d *delivery) logSettled(disp Disposition) {
	if !d.c.logger.Enabled(d.ctx, slog.LevelDebug) {
		return
	}
	d.c.logger.LogAttrs(d.ctx, slog.LevelDebug, "babelqueue: settled", d.attrs(disp)...)
}

func (d *delivery) log(level slog.Level, err *DeliveryError) {
	if !d.c.logger.Enabled(d.ctx, level) {
		return
	}
	attrs := append(d.attrs(err.Disposition), slog.String("error", err.Error()))
	d.c.logger.LogAttrs(d.ctx, level, "babelqueue: "+err.Kind.Error(), attrs...)
}

func (d *delivery) attrs(disp Disposition) []slog.Attr {
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("urn", d.urn))
	if d.env != nil {
		attrs = append(attrs, slog.String("message_id", d.env.Meta.ID), slog.String("trace_id", d.env.TraceID))
	}
	return append(attrs, slog.Int("attempts", d.attempts), slog.String("disposition", disp.String()))
}
