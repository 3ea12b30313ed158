// Dead-lettering: the dead_letter block, the copies written to the
// dead-letter queue, and the write itself, confirmed before the source is
// accepted.

package artemis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
)

// newDeadLetter fills the block for a failure. cause may be nil; exception
// names its Go type as exceptionName does.
func newDeadLetter(reason string, cause error, queue string, attempts int, now time.Time) *DeadLetter {
	dl := &DeadLetter{
		Reason:        reason,
		FailedAt:      now.UnixMilli(),
		OriginalQueue: queue,
		Attempts:      attempts,
		Lang:          Lang,
	}
	if cause != nil {
		text := errorText(cause)
		dl.Error = &text
		typ := exceptionName(cause)
		dl.Exception = &typ
	}
	return dl
}

// The types that tell an operator nothing about a failure: errors.New's,
// fmt.Errorf's (with one %w, with several) and errors.Join's.
var anonymousErrors = [...]reflect.Type{
	reflect.TypeOf(errors.New("")),
	reflect.TypeOf(fmt.Errorf("%w", errors.ErrUnsupported)),
	reflect.TypeOf(fmt.Errorf("%w%w", errors.ErrUnsupported, errors.ErrUnsupported)),
	reflect.TypeOf(errors.Join(errors.ErrUnsupported)),
}

// exceptionName is dead_letter.exception for a failure (CONTRACT.md section
// 5): the Go type of the first error in cause's chain, depth first through
// Unwrap() error and Unwrap() []error, that has a type of its own, else
// "error". Looked through on the way: the anonymous types above and the
// library's own envelopes around a handler's failure, *DeliveryError and
// *PanicError, so the name is the handler's error type, not the library's.
// A panic is "panic: " and its value's type, an error value named the same
// way (panic(errors.New("x")) is "panic: error"). An *OutcomeError, a
// broker outcome of its own, is named as it is.
func exceptionName(cause error) string {
	if name, ok := ownType(cause); ok {
		return name
	}
	return "error"
}

func ownType(err error) (string, bool) {
	switch e := err.(type) {
	case nil:
		return "", false
	case *PanicError:
		if v, ok := e.Value.(error); ok {
			return "panic: " + exceptionName(v), true
		}
		return fmt.Sprintf("panic: %T", e.Value), true
	case *DeliveryError:
		return ownType(e.Err)
	case *unprintableError:
		return ownType(e.err)
	case interface{ Unwrap() []error }:
		if isAnonymous(err) {
			for _, inner := range e.Unwrap() {
				if name, ok := ownType(inner); ok {
					return name, true
				}
			}
			return "", false
		}
	case interface{ Unwrap() error }:
		if isAnonymous(err) {
			return ownType(e.Unwrap())
		}
	default:
		if isAnonymous(err) {
			return "", false
		}
	}
	return fmt.Sprintf("%T", err), true
}

func isAnonymous(err error) bool {
	t := reflect.TypeOf(err)
	for _, a := range anonymousErrors {
		if t == a {
			return true
		}
	}
	return false
}

// checkDLQName refuses a queue name whose dead-letter queue (dlqAddress)
// Artemis cannot reach: a queue part holding "::" (for "a::b::c" the DLQ
// "b::c.dlq" is read again as queue c.dlq on address b), or a blank one
// ("a::" names no queue).
func checkDLQName(queue string) error {
	_, q, ok := strings.Cut(queue, "::")
	switch {
	case !ok:
		return nil
	case q == "":
		return fmt.Errorf("%w: the queue name %q has no queue after \"::\" to name its dead-letter queue after", ErrInvalidConfig, queue)
	case strings.Contains(q, "::"):
		return fmt.Errorf("%w: the queue name %q holds \"::\" after its address: Artemis would read its dead-letter queue %q as another address::queue (or use WithoutDeadLetter)", ErrInvalidConfig, queue, dlqAddress(queue))
	}
	return nil
}

// dlqAddress is where dead-letter copies of a queue's messages go. For a
// fully qualified name (address::queue, a subscription queue on a topic) it
// is the queue's own <queue>.dlq, an anycast queue of that subscription
// alone: <address>::<queue>.dlq would be a queue on the topic's address,
// fed every publish. The name splits at its first "::", as Artemis splits
// it (CompositeAddress): the queue's name may hold "::" or start with ':'.
func dlqAddress(queue string) string {
	if _, q, ok := strings.Cut(queue, "::"); ok {
		queue = q
	}
	if queue == "" {
		return ""
	}
	return queue + ".dlq"
}

// deadLetterEnvelope builds the DLQ copy of a valid envelope: the original
// envelope (unknown keys kept) with the reconciled attempts and the block,
// projected as section 2 says. The original's out-of-band headers ride along.
func deadLetterEnvelope(env *Envelope, dl *DeadLetter, src *amqp.Message, queue string) *amqp.Message {
	cp := *env
	cp.Attempts = dl.Attempts
	cp.DeadLetter = dl
	body := cp.appendEncode(make([]byte, 0, cp.encodedSizeHint()))
	msg := projection(&cp, string(body), stringProperties(src))
	keepForDeadLetter(msg, src)
	setTo(msg, dlqAddress(queue))
	return msg
}

// withoutDuplicateID returns props less Artemis's _AMQ_DUPL_ID, copying the
// map only when it holds one (the source's map is never modified).
//
// A DLQ copy carries no duplicate id. Artemis answers accepted for a transfer
// it drops as a duplicate of an id in its cache, so an id shared by two
// different dead-letterings would lose the second: a message republished
// from the DLQ with the same meta.id and created_at (every SDK's redrive
// does that; meta is immutable) that fails again must reach the DLQ again.
// Nothing an AMQP consumer sees is unique to one stored delivery, so no id
// derived from the message can tell a repeated dead-lettering (the source's
// accept was lost) from a new one. The price: when the broker or the link
// dies between the confirmed DLQ write and the source's accept, the source
// comes back and can land on the DLQ a second time: one extra visible copy,
// never a lost message.
func withoutDuplicateID(props map[string]any) map[string]any {
	if _, ok := props[PropDuplicateID]; !ok {
		return props
	}
	cp := make(map[string]any, len(props)-1)
	for k, v := range props {
		if k != PropDuplicateID {
			cp[k] = v
		}
	}
	return cp
}

// validProperties returns props with its invalid UTF-8 names (validNames)
// and string values (validUTF8) repaired, copying the map only when one is
// (the source's map is never modified).
func validProperties(props map[string]any) map[string]any {
	names := validNames(props)
	bad := names != nil
	for _, v := range props {
		s, ok := v.(string)
		bad = bad || ok && validUTF8(s) != s
	}
	if !bad {
		return props
	}
	cp := make(map[string]any, len(props))
	for k, v := range props {
		if s, ok := v.(string); ok {
			v = validUTF8(s)
		}
		cp[renamed(names, k)] = v
	}
	return cp
}

// stringProperties keeps the string application properties that are not
// contract properties: the out-of-band headers to carry forward, names
// repaired as validProperties does and values to valid UTF-8 (validUTF8).
func stringProperties(msg *amqp.Message) map[string]string {
	var h map[string]string
	names := validNames(msg.ApplicationProperties)
	for k, v := range msg.ApplicationProperties {
		s, ok := v.(string)
		if !ok || len(k) >= 3 && k[:3] == "bq_" || k == PropDuplicateID {
			continue
		}
		if h == nil {
			h = make(map[string]string)
		}
		h[renamed(names, k)] = validUTF8(s)
	}
	return h
}

// validNames maps each invalid UTF-8 name of props to a valid one no other
// name of props has, or is nil when every name is valid. Repairing alone
// (validUTF8) would merge names ("h\xff", "h\xfe" and a valid "h\uFFFD"
// are all "h\uFFFD"), and which value a copy kept would depend on the map's
// order. So a valid name keeps its name, and the invalid ones, taken in the
// byte order of their names, are repaired and, when that name is taken,
// suffixed "~2", "~3", ... (the first free): the same properties always
// give the same names, and no property is lost.
func validNames[V any](props map[string]V) map[string]string {
	var bad []string
	for k := range props {
		if !utf8.ValidString(k) {
			bad = append(bad, k)
		}
	}
	if bad == nil {
		return nil
	}
	slices.Sort(bad)
	names := make(map[string]string, len(bad))
	taken := make(map[string]bool, len(bad))
	free := func(n string) bool {
		_, held := props[n] // a valid name: invalid ones are never looked up
		return !held && !taken[n]
	}
	for _, k := range bad {
		base := validUTF8(k)
		n := base
		for i := 2; !free(n); i++ {
			n = base + "~" + strconv.Itoa(i)
		}
		taken[n] = true
		names[k] = n
	}
	return names
}

// renamed is k's name in a copy: its repaired name in names (validNames),
// else k.
func renamed(names map[string]string, k string) string {
	if n, ok := names[k]; ok {
		return n
	}
	return k
}

func setTo(msg *amqp.Message, addr string) {
	if addr == "" {
		return
	}
	if msg.Properties == nil {
		msg.Properties = &amqp.MessageProperties{}
	}
	msg.Properties.To = &addr
}

// The annotations by which Artemis routes a message with a routing type of
// its own, over the one the link asks for: a JMS producer's destination
// type (0 queue, 1 topic) and Artemis's routing type (0 multicast, 1
// anycast).
const (
	annotationJMSDest     = "x-opt-jms-dest"
	annotationRoutingType = "x-opt-routing-type"
)

// forwardCopy is the message as received, for the DLQ: the same body section
// kind byte for byte, the same properties, application properties and
// annotations, less scheduled-delivery annotations (they would delay the DLQ
// copy), the routing ones (a JMS topic publisher's x-opt-jms-dest 1 would
// have Artemis route the copy as multicast to the anycast DLQ, drop it
// there and answer accepted: a lost message), the delivery details of this
// hop and the source's _AMQ_DUPL_ID (withoutDuplicateID). A DLQ copy is
// always durable.
func forwardCopy(src *amqp.Message, queue string) *amqp.Message {
	msg := &amqp.Message{
		Format:                src.Format,
		Header:                &amqp.MessageHeader{Durable: true, Priority: defaultPriority},
		ApplicationProperties: validProperties(withoutDuplicateID(src.ApplicationProperties)),
		Data:                  src.Data,
		Value:                 src.Value,
		Sequence:              src.Sequence,
		Footer:                src.Footer,
	}
	if src.Header != nil {
		msg.Header.Priority = src.Header.Priority
	}
	if src.Properties != nil {
		p := *src.Properties
		msg.Properties = &p
	}
	if len(src.Annotations) > 0 {
		msg.Annotations = make(amqp.Annotations, len(src.Annotations))
		for k, v := range src.Annotations {
			switch k {
			case AnnotationDeliveryTime, AnnotationDeliveryDelay, annotationJMSDest, annotationRoutingType:
				continue
			}
			msg.Annotations[k] = v
		}
	}
	keepForDeadLetter(msg, src)
	setTo(msg, dlqAddress(queue))
	return msg
}

// writeCopy sends msg (a dead-letter or a retry copy) on s and succeeds
// only on the broker's accepted outcome within the dead-letter timeout.
func (d *delivery) writeCopy(s Sender, msg *amqp.Message) error {
	ctx, cancel := context.WithTimeout(d.settleCtx(), d.c.dlqTimeout)
	defer cancel()
	err := sendConfirmed(ctx, s, msg)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Not only ctx.Err() itself: a transfer still waiting for link
		// credit when the time runs out (Artemis grants none to a link on a
		// full address) comes back from go-amqp as its own
		// amqp:link:transfer-limit-exceeded error.
		err = fmt.Errorf("no outcome within %v: %w", d.c.dlqTimeout, err)
	}
	return err
}

// deadLetter writes dlqMsg and accepts the source only once the broker
// accepted the copy. A failed write is reported, the source is held for the
// retry delay and then plainly released, so it is never lost and does not
// count toward Artemis's max-delivery-attempts.
func (d *delivery) deadLetter(kind DeliveryKind, cause error, dlqMsg *amqp.Message) error {
	err := d.writeCopy(d.c.dlq, dlqMsg)
	if err == nil {
		return d.finish(kind, cause, DispositionDeadLettered, d.accept)
	}
	dlqErr := fmt.Errorf("%w (dead-lettering after: %w)", err, cause)
	return d.finish(KindDeadLetterFailed, dlqErr, DispositionReleased, func() error {
		d.wait(d.c.retryDelay)
		return d.release()
	})
}
