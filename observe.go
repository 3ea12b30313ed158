// Observability hooks: the Observer the Consumer and the publishers call
// for every settlement and every publish, so metrics need no wrapping of
// handlers and no dependency in this module.

package artemis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Observer hears of every settlement a Consumer makes and of every publish
// a Publisher (or a Client's publisher) makes: what counters, histograms
// and traces are built from. Set it with WithObserver, given to
// NewConsumer, to a publisher (NewPublisher, Client.Publisher,
// Client.TopicPublisher) or to one publish.
//
// Its methods are called synchronously on the goroutine that settled the
// delivery or made the publish: a Listen worker, a Consume loop, the
// caller of Publish. They may be called from several goroutines at once,
// so an Observer must be safe for concurrent use, and it must not block:
// the next delivery of that worker waits for it. A panic in a method is
// recovered and logged; it never changes the settlement or the publish.
// An event is passed by value and its fields are only read, so an Observer
// that only counts allocates nothing.
type Observer interface {
	// Settled is called once for every delivery the Consumer settled (or
	// failed to settle), after the disposition went to the broker.
	Settled(SettleEvent)
	// Published is called once for every publish, after the broker's
	// outcome (or the failure) is known.
	Published(PublishEvent)
}

// SettleEvent is one delivery's settlement.
type SettleEvent struct {
	// Queue is the consumer's queue (WithQueue, else the receiver's address).
	Queue string
	// URN is the routing URN ("" when none was found).
	URN string
	// MessageID is meta.id ("" when the body was not decoded).
	MessageID string
	// Disposition is what was sent to the broker; DispositionPending when the
	// settlement itself failed.
	Disposition Disposition
	// Kind is KindNone when the handler succeeded, else what happened:
	// KindHandlerFailed, KindUnknownURN (also under the release and delete
	// strategies, which report nothing), KindPoison, KindVersionGated,
	// KindDeadLetterFailed, KindInvalidPayload, KindGivenBack for a
	// delivery Listen took but never started and released on its way out
	// (shutdown, link loss), KindInvalidConfig for a delivery released by a
	// Consumer that cannot handle anything, or KindSettlement when the
	// disposition could not be sent (Disposition is then
	// DispositionPending). Kind.String() is its metric label.
	Kind DeliveryKind
	// Err is the cause: the handler's error, the decode error, the
	// dead-letter write error, the settlement error; nil on success.
	Err error
	// Attempts is the reconciled attempts of the delivery.
	Attempts int
	// Handler is how long the handler ran (0 when it was not called).
	Handler time.Duration
	// RetryDelay is the wait of a scheduled retry (DispositionScheduled):
	// the copy is due that long after the handler failed; 0 otherwise.
	RetryDelay time.Duration
	// Latency is the time from the start of the handler (for a delivery
	// that reaches no handler: from the decision to settle it) to the end
	// of its settlement: the handler, a dead-letter write and its retry
	// hold, and the disposition. The gate and the decoding before it, a few
	// microseconds at most, are left out, which spares a clock read.
	Latency time.Duration
}

// PublishOutcome says how a publish ended.
type PublishOutcome int

// The publish outcomes, read from the publish's error.
const (
	// PublishAccepted: the broker accepted the transfer.
	PublishAccepted PublishOutcome = iota + 1
	// PublishNotAccepted: the broker rejected, released or modified it (the
	// error matches ErrNotAccepted); the message is not stored.
	PublishNotAccepted
	// PublishUnknown: the transfer may have been written but its outcome
	// never came (the error matches ErrOutcomeUnknown, which the Client's
	// publishers report); the broker may have stored the message.
	PublishUnknown
	// PublishFailed: any other error: refused before a transfer (an invalid
	// envelope or option, ErrClosed, ErrConnect), or a link or context error
	// of a plain Sender, which cannot tell whether the transfer was written.
	PublishFailed
)

// String names the outcome.
func (o PublishOutcome) String() string {
	switch o {
	case PublishAccepted:
		return "accepted"
	case PublishNotAccepted:
		return "not_accepted"
	case PublishUnknown:
		return "unknown"
	case PublishFailed:
		return "error"
	}
	return fmt.Sprintf("PublishOutcome(%d)", int(o))
}

// publishOutcome classifies a publish's error.
func publishOutcome(err error) PublishOutcome {
	switch {
	case err == nil:
		return PublishAccepted
	case errors.Is(err, ErrNotAccepted):
		return PublishNotAccepted
	case errors.Is(err, ErrOutcomeUnknown):
		return PublishUnknown
	}
	return PublishFailed
}

// PublishEvent is one publish.
type PublishEvent struct {
	// Queue is the publisher's queue.
	Queue string
	// URN is the envelope's URN.
	URN string
	// MessageID is meta.id ("" when no envelope was built).
	MessageID string
	// Outcome says how the publish ended.
	Outcome PublishOutcome
	// Err is the publish's error, nil when accepted.
	Err error
	// Duration is the time from the projection of the envelope to the
	// broker's outcome (0 when no envelope was built).
	Duration time.Duration
}

// recoverHook, deferred around a call into user code, recovers a panic and
// logs it at error to l, or slog.Default() when l is nil: a callback that
// panics has lost what it was told, so that is never silent.
func recoverHook(l *slog.Logger, msg string) {
	p := recover()
	if p == nil {
		return
	}
	if l == nil {
		l = slog.Default()
	}
	logLine(context.Background(), l, slog.LevelError, msg, slog.String("panic", fmt.Sprint(p)))
}

// logLine writes one line to l. A logger's handler is user code: a panic
// in it is recovered, and the line replaced by a short one on
// slog.Default() (dropped when that is l, or panics too), so a broken
// logger never ends the goroutine that reports a delivery, nor the process.
func logLine(ctx context.Context, l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	defer func() {
		if p := recover(); p != nil {
			loggerPanicked(l, msg, p)
		}
	}()
	l.LogAttrs(ctx, level, msg, attrs...)
}

// enabled is l.Enabled(ctx, level), true when that panics (user code
// too): the line then goes to logLine, which recovers the panic again and
// replaces the line.
func enabled(ctx context.Context, l *slog.Logger, level slog.Level) (on bool) {
	defer func() {
		if recover() != nil {
			on = true
		}
	}()
	return l.Enabled(ctx, level)
}

// loggerPanicked is logLine's replacement line for msg, whose logger l
// panicked with p.
func loggerPanicked(l *slog.Logger, msg string, p any) {
	fallback := slog.Default()
	if fallback == l {
		return
	}
	defer func() { _ = recover() }()
	fallback.LogAttrs(context.Background(), slog.LevelError, "logger panicked",
		slog.String("message", msg), slog.String("panic", fmt.Sprint(p)))
}

// errorText is err.Error(), or a fixed text naming err's type when that
// panics: an error's Error method may be user code.
func errorText(err error) string {
	text, ok := tryErrorText(err)
	if !ok {
		return unprintableText(err, "panicked")
	}
	return text
}

// tryErrorText is err.Error(), ok false when that panicked.
func tryErrorText(err error) (text string, ok bool) {
	defer func() {
		if recover() != nil {
			text, ok = "", false
		}
	}()
	return err.Error(), true
}

func unprintableText(err error, what string) string {
	return fmt.Sprintf("%T (its Error method %s)", err, what)
}

// printable returns err when its Error method works, else err behind a
// fixed text (its chain kept for errors.Is and errors.As), so the reports
// and the records of a delivery never call the broken method again. A
// method that exits the goroutine (runtime.Goexit) exits it here, where
// the caller is ready for it (the handler's call).
func printable(err error) error {
	if _, ok := tryErrorText(err); ok {
		return err
	}
	return &unprintableError{err: err, text: unprintableText(err, "panicked")}
}
