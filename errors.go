package artemis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
)

// errPrefix begins the text of every sentinel error of the package, and of
// no error that wraps another.
const errPrefix = "artemis: "

// Sentinel errors. Every error the consumer reports is a *DeliveryError whose
// Is method matches exactly one of them (the one of its Kind), so a callback
// can tell the cases apart with errors.Is, or with a switch on Kind.
var (
	// ErrUnknownURN: no handler is registered for the message's URN.
	ErrUnknownURN = errors.New("artemis: no handler for the URN")
	// ErrPoison: the body is not a valid envelope.
	ErrPoison = errors.New("artemis: poison message")
	// ErrVersionGated: the bq_schema_version application property is not "1".
	ErrVersionGated = errors.New("artemis: unsupported bq_schema_version")
	// ErrHandlerFailed: the handler returned an error or panicked.
	ErrHandlerFailed = errors.New("artemis: handler failed")
	// ErrDeadLetterFailed: a write to the dead-letter queue was not confirmed.
	ErrDeadLetterFailed = errors.New("artemis: dead-letter write failed")
	// ErrRetryFailed: a scheduled retry copy was not confirmed; after the
	// dead-letter retry delay the delivery was retried at once (modified
	// with delivery-failed: the failed attempt counts toward maxTries).
	ErrRetryFailed = errors.New("artemis: retry write failed")
	// ErrSettlement: the disposition could not be sent to the broker (the
	// link or connection is gone); the broker redelivers the message.
	ErrSettlement = errors.New("artemis: settlement failed")
	// ErrNotAccepted is matched by an *OutcomeError: the broker settled a
	// transfer with an outcome other than accepted (one it settled without
	// any outcome matches ErrOutcomeUnknown instead).
	ErrNotAccepted = errors.New("artemis: transfer not accepted by the broker")
	// ErrInvalidConfig: a Consumer, Client or Consume option has an invalid value.
	ErrInvalidConfig = errors.New("artemis: invalid configuration")
)

// ErrHandlerExited is the cause (DeliveryError.Err) of an ErrHandlerFailed
// report when the handler exited its goroutine without returning
// (runtime.Goexit; t.FailNow and require.* in tests do). The attempt counts
// as failed, as a returned error does: redelivered below the limit,
// dead-lettered at it.
var ErrHandlerExited = errors.New("artemis: handler exited its goroutine without returning")

// ErrGivenBack is the sentinel of KindGivenBack, the Kind of a SettleEvent
// for a delivery the Consumer took from the link but never started, and
// gave back to the broker with a plain release (its delivery count untouched) because Listen was stopping: its
// context ended, or the link was lost. It is not reported to WithOnError
// (nothing failed; the broker delivers the message again), only observed.
var ErrGivenBack = errors.New("artemis: delivery given back unstarted")

// ErrInvalidPayload is matched by a *PayloadError: the data object of a
// message does not satisfy the schema registered for its URN. A publish
// refused for it sent nothing; a consumer reports it as a *DeliveryError of
// KindInvalidPayload.
var ErrInvalidPayload = errors.New("artemis: invalid payload")

// ErrDecrypt is matched by the error of a message whose protected data (the
// fields a PayloadProtector encrypts) could not be restored: a wrong key, a
// tampered or garbled value. The message is not retried (it will not
// decrypt later): it is written at once to the dead-letter queue with
// reason failed, as it travelled, and reported as a *DeliveryError of
// KindDecryptFailed. The error names the field, never its value or a key.
var ErrDecrypt = errors.New("artemis: cannot decrypt a protected field")

// ErrInvalidEnvelope is wrapped by every error that Decode, Validate and
// NewEnvelope return for input that is not a valid envelope.
var ErrInvalidEnvelope = errors.New("artemis: invalid envelope")

// errNotBuilt is returned by the methods of a Publisher, Client,
// ClientPublisher or Receipt that was declared as a zero value instead of
// being made by its constructor.
var errNotBuilt = fmt.Errorf("%w: a zero value: use NewPublisher, Dial or Client.Publisher", ErrInvalidConfig)

// Errors of the Client.
var (
	// ErrConnect: no broker URL could be connected to. The error lists each
	// URL (password redacted) with its cause.
	ErrConnect = errors.New("artemis: cannot connect to any broker")
	// ErrOutcomeUnknown: the connection or link failed, or the context
	// ended, after a transfer may have been written, or the broker settled
	// it without an outcome (an *OutcomeError with a nil State), so the
	// broker may or may not have stored the message. See Client.Publisher.
	ErrOutcomeUnknown = errors.New("artemis: publish outcome unknown, the broker may have stored the message")
	// ErrClosed: the Client, or the ClientPublisher, was closed.
	ErrClosed = errors.New("artemis: client closed")
)

// errTransferCut: a transfer's context ended between two of its frames
// (outcome.go, cutBetweenFrames); its link is detached.
var errTransferCut = errors.New("the transfer was cut between its frames: its link is detached, and the broker discards the incomplete message")

// errLossHandlingCut: a callback ended the goroutine that handled a
// receipt's lost outcome (client_receipt.go, resolve).
var errLossHandlingCut = errors.New("the handling of the lost outcome was ended by a callback that exited its goroutine")

// Disposition is what the consumer did with a delivery.
type Disposition int

// The dispositions, named after what the broker does with the message.
const (
	// DispositionPending: no disposition was sent (the settlement itself failed).
	DispositionPending Disposition = iota
	// DispositionAccepted: the message was handled and is gone from the queue.
	DispositionAccepted
	// DispositionAbandoned: modified with delivery-failed; the broker redelivers it and
	// increments its delivery count.
	DispositionAbandoned
	// DispositionReleased: plainly released; the broker redelivers it without counting.
	DispositionReleased
	// DispositionDeadLettered: a copy was confirmed on the dead-letter queue, then the
	// source was accepted.
	DispositionDeadLettered
	// DispositionDropped: accepted without a dead-letter copy.
	DispositionDropped
	// DispositionScheduled: a copy carrying the next attempt was confirmed
	// on the queue, scheduled for later (the retry schedule), then the
	// source was accepted.
	DispositionScheduled
)

// String returns the disposition's name.
func (d Disposition) String() string {
	switch d {
	case DispositionAccepted:
		return "accepted"
	case DispositionAbandoned:
		return "abandoned"
	case DispositionReleased:
		return "released"
	case DispositionDeadLettered:
		return "dead_lettered"
	case DispositionDropped:
		return "dropped"
	case DispositionScheduled:
		return "scheduled"
	}
	return "pending"
}

// DeliveryKind says what happened to a delivery that was not simply
// handled: the Kind of a DeliveryError and of a SettleEvent. The zero value,
// KindNone, is a delivery its handler handled (a SettleEvent of a success).
// Each other kind stands for one sentinel error (Err), which a DeliveryError
// of that kind matches with errors.Is; compare kinds with == and switch on
// them, and use String for a metric label or a log field.
type DeliveryKind uint8

// The delivery kinds.
const (
	// KindNone: the handler succeeded; no error.
	KindNone DeliveryKind = iota
	// KindHandlerFailed: the handler returned an error or panicked (ErrHandlerFailed).
	KindHandlerFailed
	// KindUnknownURN: no handler is registered for the URN (ErrUnknownURN).
	KindUnknownURN
	// KindPoison: the body is not a valid envelope (ErrPoison).
	KindPoison
	// KindVersionGated: bq_schema_version is not "1" (ErrVersionGated).
	KindVersionGated
	// KindDeadLetterFailed: a dead-letter write was not confirmed (ErrDeadLetterFailed).
	KindDeadLetterFailed
	// KindSettlement: the disposition could not be sent (ErrSettlement).
	KindSettlement
	// KindInvalidPayload: the data failed the consumer's payload check (ErrInvalidPayload).
	KindInvalidPayload
	// KindGivenBack: a delivery taken but never started, released on
	// Listen's way out (ErrGivenBack). Observed only, never reported.
	KindGivenBack
	// KindInvalidConfig: a Consumer that cannot handle anything released
	// the delivery (ErrInvalidConfig). Observed only; the error is
	// returned by Handle itself.
	KindInvalidConfig
	// KindDecryptFailed: the protected data could not be restored before
	// the payload check and the handler (ErrDecrypt).
	KindDecryptFailed
	// KindRetryFailed: a scheduled retry copy was not confirmed (ErrRetryFailed).
	KindRetryFailed
)

// deliveryKinds are the kinds' labels and sentinels, indexed by kind.
var deliveryKinds = [...]struct {
	name string
	err  error
}{
	KindNone:             {"", nil},
	KindHandlerFailed:    {"handler_failed", ErrHandlerFailed},
	KindUnknownURN:       {"unknown_urn", ErrUnknownURN},
	KindPoison:           {"poison", ErrPoison},
	KindVersionGated:     {"version_gated", ErrVersionGated},
	KindDeadLetterFailed: {"dead_letter_failed", ErrDeadLetterFailed},
	KindSettlement:       {"settlement_failed", ErrSettlement},
	KindInvalidPayload:   {"invalid_payload", ErrInvalidPayload},
	KindGivenBack:        {"given_back", ErrGivenBack},
	KindInvalidConfig:    {"invalid_config", ErrInvalidConfig},
	KindDecryptFailed:    {"decrypt_failed", ErrDecrypt},
	KindRetryFailed:      {"retry_failed", ErrRetryFailed},
}

// String is the kind's label for a metric attribute or a log field: ""
// for KindNone, else "handler_failed", "unknown_urn", "poison",
// "version_gated", "dead_letter_failed", "settlement_failed",
// "invalid_payload", "given_back", "invalid_config", "decrypt_failed" or
// "retry_failed"; a value outside the
// constants is "DeliveryKind(N)".
func (k DeliveryKind) String() string {
	if int(k) < len(deliveryKinds) {
		return deliveryKinds[k].name
	}
	return "DeliveryKind(" + strconv.Itoa(int(k)) + ")"
}

// Err is the sentinel error of the kind (ErrPoison for KindPoison, ...),
// nil for KindNone and for a value outside the constants.
func (k DeliveryKind) Err() error {
	if int(k) < len(deliveryKinds) {
		return deliveryKinds[k].err
	}
	return nil
}

// DeliveryError is the error the consumer reports for one delivery. Kind
// says what happened, and the error matches that kind's sentinel error
// (errors.Is(err, ErrPoison) for KindPoison); Err is the cause (the
// handler's error, the decode error, the dead-letter write error),
// reachable with errors.As.
type DeliveryError struct {
	// Kind says what happened: KindUnknownURN, KindPoison,
	// KindVersionGated, KindHandlerFailed, KindDeadLetterFailed,
	// KindSettlement, KindInvalidPayload or KindDecryptFailed.
	Kind DeliveryKind
	// URN is the routing URN ("" when none was found).
	URN string
	// MessageID is meta.id when the body was decoded.
	MessageID string
	// Attempts is the reconciled attempts of the delivery.
	Attempts int
	// Disposition is what was sent to the broker for the delivery.
	Disposition Disposition
	// Err is the cause.
	Err error
}

// Error describes the delivery, what was done with it and why. It reads
// "artemis: <kind> ...", or, when it has a cause, "<kind> ...: <cause>":
// an error that wraps another adds no prefix of its own.
func (e *DeliveryError) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	kind := "artemis: delivery error"
	if k := e.Kind.Err(); k != nil {
		kind = k.Error()
	}
	if e.Err != nil {
		kind = strings.TrimPrefix(kind, errPrefix)
	}
	b.WriteString(kind)
	if e.URN != "" {
		b.WriteString(" (urn ")
		b.WriteString(e.URN)
		if e.MessageID != "" {
			b.WriteString(", id ")
			b.WriteString(e.MessageID)
		}
		b.WriteString(", attempts ")
		b.WriteString(strconv.Itoa(e.Attempts))
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(e.Disposition.String())
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is reports whether target is the sentinel error of the error's Kind.
func (e *DeliveryError) Is(target error) bool {
	k := e.Kind.Err()
	return k != nil && target == k
}

// Unwrap returns the cause.
func (e *DeliveryError) Unwrap() error { return e.Err }

// PanicError is the cause recorded when a handler panics.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the handler goroutine's stack at the panic.
	Stack []byte
}

// Error reports the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// unprintableError is an error whose own Error method panicked or exited
// the goroutine, behind a fixed text naming its type; Unwrap returns it.
type unprintableError struct {
	err  error
	text string
}

func (e *unprintableError) Error() string { return e.text }
func (e *unprintableError) Unwrap() error { return e.err }

// OutcomeError reports a transfer the broker settled with an outcome other
// than accepted: rejected, released or modified. It matches ErrNotAccepted;
// with a nil State (settled without an outcome) it matches
// ErrOutcomeUnknown instead: the broker may have stored the message.
type OutcomeError struct {
	// State is the broker's outcome (*amqp.StateRejected, *amqp.StateReleased,
	// *amqp.StateModified), or nil when the transfer was settled without one.
	State amqp.DeliveryState
}

// Error names the outcome.
func (e *OutcomeError) Error() string {
	switch s := e.State.(type) {
	case *amqp.StateRejected:
		if s.Error != nil {
			return "artemis: broker rejected the transfer: " + s.Error.Error()
		}
		return "artemis: broker rejected the transfer"
	case *amqp.StateReleased:
		return "artemis: broker released the transfer"
	case *amqp.StateModified:
		return fmt.Sprintf("artemis: broker modified the transfer (delivery-failed %t, undeliverable-here %t)", s.DeliveryFailed, s.UndeliverableHere)
	case nil:
		return "artemis: broker settled the transfer without an outcome"
	}
	return fmt.Sprintf("artemis: broker outcome %T, not accepted", e.State)
}

// Is matches ErrNotAccepted, or ErrOutcomeUnknown when there is no outcome.
func (e *OutcomeError) Is(target error) bool {
	if e.State == nil {
		return target == ErrOutcomeUnknown
	}
	return target == ErrNotAccepted
}

// Unwrap returns the broker's *amqp.Error of a rejected outcome, if any.
func (e *OutcomeError) Unwrap() error {
	if s, ok := e.State.(*amqp.StateRejected); ok && s.Error != nil {
		return s.Error
	}
	return nil
}

// urlError is the failure of one broker URL.
type urlError struct {
	url string
	err error
}

func (e *urlError) Error() string { return e.url + ": " + e.err.Error() }
func (e *urlError) Unwrap() error { return e.err }

// connectError is the failure of every broker URL. It matches ErrConnect.
type connectError struct {
	errs []error
}

func (e *connectError) Error() string {
	var b strings.Builder
	b.WriteString(ErrConnect.Error())
	for i, err := range e.errs {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *connectError) Is(target error) bool { return target == ErrConnect }
func (e *connectError) Unwrap() []error      { return e.errs }

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// linkLost reports an error meaning the link, its session or its
// connection is gone. A context's end is not one (context.DeadlineExceeded
// is a net.Error, so it is ruled out first).
func linkLost(err error) bool {
	if err == nil || isContextError(err) {
		return false
	}
	var le *amqp.LinkError
	return errors.As(err, &le) || connectionLost(err)
}

// connectionLost reports an error that takes the session or the whole
// connection down.
func connectionLost(err error) bool {
	if err == nil || isContextError(err) {
		return false
	}
	var (
		se *amqp.SessionError
		ce *amqp.ConnError
		ne net.Error
	)
	return errors.As(err, &se) || errors.As(err, &ce) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// publishError names the urn and the queue of a publish that failed.
func publishError(queue, urn string, err error) error {
	return fmt.Errorf("publish %s to %s: %w", urn, queue, err)
}

func truncate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut-- // not inside a multi-byte sequence
	}
	return s[:cut] + "..."
}
