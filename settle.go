// Settlement: the delivery on its way to exactly one disposition (accept,
// modified, release), and what every settlement reports: the error
// callback, the log line, the observer, the cluster's attempt memory.

package artemis

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/Azure/go-amqp"
)

// delivery is one message on its way to exactly one disposition.
type delivery struct {
	c        *Consumer
	r        Receiver
	msg      *amqp.Message
	ctx      context.Context
	stop     <-chan struct{} // ends the retry hold (wait)
	lost     func(error)     // hears of a failed settlement (Listen's loop)
	env      *Envelope
	restored *Envelope // env with the data a PayloadProtector restored, for the handler (nil: env)
	urn      string
	attempts int
	// quiet: the strategy settles without a report (unknown URN under
	// release and delete); the observer still hears why.
	quiet bool
	// start and handler are read only when the consumer has an observer.
	start   time.Time
	handler time.Duration
	delay   time.Duration // a scheduled retry's wait
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

// wait holds the delivery for dur, cut short when stop closes: the end of
// Handle's ctx, or under Listen the end of its ctx or the loss of the link.
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

// finish settles with settle, then reports kind (when not KindNone and the
// delivery is not quiet) with the disposition that was really sent, and a
// failed settlement on its own; the observer hears the final fate. The
// report for a dead-letter failure goes out before the hold, so the
// callback hears of it at once.
func (d *delivery) finish(kind DeliveryKind, cause error, disp Disposition, settle func() error) error {
	d.rememberFailure(kind, disp)
	var reported *DeliveryError
	if kind != KindNone && !d.quiet {
		reported = d.deliveryError(kind, cause, disp)
		if kind == KindDeadLetterFailed || kind == KindRetryFailed {
			return d.reportThenSettle(kind, cause, disp, reported, settle)
		}
	}
	return d.settled(kind, cause, disp, reported, false, settle())
}

// reportThenSettle reports before it settles. A callback or a logger that
// exits the goroutine there (runtime.Goexit, as t.FailNow does) or panics
// does not leave the delivery unsettled: it is settled on the way out.
func (d *delivery) reportThenSettle(kind DeliveryKind, cause error, disp Disposition, reported *DeliveryError, settle func() error) error {
	done := false
	defer func() {
		if !done {
			_ = d.settled(kind, cause, disp, reported, true, settle())
		}
	}()
	d.c.report(d.ctx, reported, d.env, d.msg)
	d.log(slog.LevelError, reported)
	done = true
	return d.settled(kind, cause, disp, reported, true, settle())
}

// settled is finish once settle returned serr: the reports (reported, when
// not nil, only if it did not go out already), the observer and the
// result.
func (d *delivery) settled(kind DeliveryKind, cause error, disp Disposition, reported *DeliveryError, reportedFirst bool, serr error) error {
	if serr != nil {
		if d.lost != nil {
			// First, so Listen starts nothing more on a dead link while
			// this delivery is still being reported.
			d.lost(serr)
		}
		settleErr := d.deliveryError(KindSettlement, serr, DispositionPending)
		if reported != nil && !reportedFirst {
			reported.Disposition = DispositionPending
			d.c.report(d.ctx, reported, d.env, d.msg)
			d.log(level(reported), reported)
		}
		d.c.report(d.ctx, settleErr, d.env, d.msg)
		d.log(slog.LevelError, settleErr)
		d.observe(KindSettlement, serr, DispositionPending)
		if reported != nil {
			return fmt.Errorf("%w; %w", reported, settleErr)
		}
		return settleErr
	}
	d.remember(disp) // first: an observer may exit the goroutine
	d.observe(kind, cause, disp)
	if reported == nil {
		d.logSettled(disp)
		return nil
	}
	if !reportedFirst {
		d.c.report(d.ctx, reported, d.env, d.msg)
		d.log(level(reported), reported)
	}
	return reported
}

// level is the log level of a reported error: error for a loss (dropped)
// or a failure to settle, warn for the rest (a retry, a dead-letter copy).
func level(e *DeliveryError) slog.Level {
	if e.Disposition == DispositionDropped || e.Disposition == DispositionPending || e.Kind == KindSettlement {
		return slog.LevelError
	}
	return slog.LevelWarn
}

func (d *delivery) deliveryError(kind DeliveryKind, cause error, disp Disposition) *DeliveryError {
	e := &DeliveryError{Kind: kind, URN: d.urn, Attempts: d.attempts, Disposition: disp, Err: cause}
	if d.env != nil {
		e.MessageID = d.env.Meta.ID
	}
	return e
}

func (d *delivery) logSettled(disp Disposition) {
	l := d.c.logTo(d.ctx, slog.LevelDebug)
	if l == nil {
		return
	}
	logLine(d.ctx, l, slog.LevelDebug, "settled", deliveryAttrs(d.queue(), d.urn, d.env, d.attempts, disp)...)
}

func (d *delivery) log(level slog.Level, err *DeliveryError) {
	d.c.logError(d.ctx, level, err, d.queue(), d.env)
}

// logTo returns the logger a line at level goes to, or nil for none. The
// rule: the WithLogger logger when set; else, when no WithOnError callback
// is set either, slog.Default() for warn and error (never the debug
// lines), so nothing is dropped, dead-lettered or left unsettled without a
// word; else (the callback is the report) nowhere.
func (c *Consumer) logTo(ctx context.Context, level slog.Level) *slog.Logger {
	return chooseLogger(ctx, c.logger, c.onError != nil, level)
}

// chooseLogger is the rule of the Consumer's and the Client's logs: the
// logger l a line at level goes to when l is set; else, without a callback
// (hasCallback false), slog.Default() for warn and above; else none. nil
// means the line is not logged (also when the logger has level disabled).
func chooseLogger(ctx context.Context, l *slog.Logger, hasCallback bool, level slog.Level) *slog.Logger {
	if l == nil {
		if hasCallback || level < slog.LevelWarn {
			return nil
		}
		l = slog.Default()
	}
	if !enabled(ctx, l, level) {
		return nil
	}
	return l
}

// logError logs a reported error: a short fixed message that says what
// happened and what was done, the rest in attributes, the cause alone as
// the error attribute.
func (c *Consumer) logError(ctx context.Context, level slog.Level, err *DeliveryError, queue string, env *Envelope) {
	l := c.logTo(ctx, level)
	if l == nil {
		return
	}
	attrs := deliveryAttrs(queue, err.URN, env, err.Attempts, err.Disposition)
	if err.Err != nil {
		attrs = append(attrs, slog.String("error", errorText(err.Err)))
	}
	logLine(ctx, l, level, logMessage(err.Kind, err.Disposition), attrs...)
}

// logMessage is the fixed message of a reported error.
func logMessage(kind DeliveryKind, disp Disposition) string {
	if kind == KindSettlement {
		return "settlement failed"
	}
	var what string
	switch kind {
	case KindHandlerFailed:
		what = "handler failed"
	case KindUnknownURN:
		what = "no handler for the URN"
	case KindPoison:
		what = "poison message"
	case KindVersionGated:
		what = "unsupported schema version"
	case KindDeadLetterFailed:
		what = "dead-letter write failed"
	case KindRetryFailed:
		what = "retry write failed"
	default:
		what = "delivery failed"
	}
	switch disp {
	case DispositionAbandoned:
		return what + ", retrying"
	case DispositionScheduled:
		return what + ", retry scheduled"
	case DispositionReleased:
		return what + ", releasing"
	case DispositionDeadLettered:
		return what + ", dead-lettered"
	case DispositionDropped:
		return what + ", dropped"
	case DispositionPending:
		return what + ", not settled"
	}
	return what + ", " + disp.String()
}

func deliveryAttrs(queue, urn string, env *Envelope, attempts int, disp Disposition) []slog.Attr {
	attrs := make([]slog.Attr, 0, 8)
	if queue != "" {
		attrs = append(attrs, slog.String("queue", queue))
	}
	attrs = append(attrs, slog.String("urn", urn))
	if env != nil {
		attrs = append(attrs, slog.String("message_id", env.Meta.ID), slog.String("trace_id", env.TraceID))
	}
	return append(attrs, slog.Int("attempts", attempts), slog.String("disposition", disp.String()))
}

// begin marks the start of a settlement that no handler comes before.
func (d *delivery) begin() {
	if d.c.observer != nil {
		d.start = d.c.now()
	}
}

// observe reports the delivery's settlement to the observer, if any.
func (d *delivery) observe(kind DeliveryKind, cause error, disp Disposition) {
	if d.c.observer == nil {
		return
	}
	ev := SettleEvent{Queue: d.queue(), URN: d.urn, Disposition: disp, Kind: kind, Err: cause,
		Attempts: d.attempts, Handler: d.handler, Latency: d.c.now().Sub(d.start)}
	if disp == DispositionScheduled {
		ev.RetryDelay = d.delay // not when the source's accept after the copy failed
	}
	if d.env != nil {
		ev.MessageID = d.env.Meta.ID
	}
	d.c.observeSettled(ev)
}

// observeSettled hands ev to the observer, recovering a panic.
func (c *Consumer) observeSettled(ev SettleEvent) {
	defer recoverHook(c.logger, "settlement observer panicked")
	c.observer.Settled(ev)
}

// rememberFailure notes in the memory of d's consumer, before the
// disposition goes to the broker, a failed attempt that is retried at
// once: on a cluster the broker may hand the message to another member's
// consumer as soon as it has the disposition, and that consumer must see
// the attempt. (A settlement that then fails leaves the attempt
// remembered: the handler did fail.)
func (d *delivery) rememberFailure(kind DeliveryKind, disp Disposition) {
	m := d.c.memory
	if m == nil || d.env == nil || d.env.Meta.ID == "" {
		return
	}
	if disp == DispositionAbandoned && (kind == KindHandlerFailed || kind == KindRetryFailed) {
		// Only an immediate retry (also the one after a retry copy that
		// was not confirmed): a scheduled copy carries its count in its
		// body, durably, which the memory never lowers.
		m.failed(d.queue(), d.env.Meta.ID, d.attempts+1)
	}
}

// remember keeps the memory of d's consumer up to date once d was settled
// with disp: a final outcome forgets.
func (d *delivery) remember(disp Disposition) {
	m := d.c.memory
	if m == nil || d.env == nil || d.env.Meta.ID == "" {
		return
	}
	if (disp == DispositionAccepted || disp == DispositionDeadLettered || disp == DispositionDropped) && m.n.Load() > 0 {
		m.forget(d.queue(), d.env.Meta.ID)
	}
}
