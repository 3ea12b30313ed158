// Routing: the URN a delivery is routed by (the JMSType annotation, else
// the body's job), and the settlement of a URN no handler is registered for,
// by the consumer's unknown-URN strategy.

package artemis

import (
	"errors"
	"strconv"
	"strings"

	"github.com/Azure/go-amqp"
)

// routingURN returns the URN to route on without decoding the body: the
// x-opt-jms-type annotation, else properties.subject (where Artemis puts the
// JMSType of a message produced by a JMS client), else "" (route on the body
// URN). A value that is not a string, or is blank, is ignored.
func routingURN(msg *amqp.Message) string {
	if v, ok := msg.Annotations[AnnotationJMSType].(string); ok && strings.TrimSpace(v) != "" {
		return v
	}
	if msg.Properties != nil && msg.Properties.Subject != nil && strings.TrimSpace(*msg.Properties.Subject) != "" {
		return *msg.Properties.Subject
	}
	return ""
}

// unknownURN settles a delivery no handler is registered for, by the
// consumer's unknown-URN strategy.
func (d *delivery) unknownURN() error {
	d.begin()
	switch d.c.unknown {
	case UnknownURNRelease:
		d.quiet = true
		return d.finish(KindUnknownURN, nil, DispositionAbandoned, d.abandon)
	case UnknownURNDelete:
		d.quiet = true
		return d.finish(KindUnknownURN, nil, DispositionDropped, d.accept)
	}
	// Only the strategies that report need the cause.
	cause := errors.New("no handler is registered for " + strconv.Quote(d.urn))
	switch d.c.unknown {
	case UnknownURNDeadLetter:
		if d.c.dlq == nil {
			return d.finish(KindUnknownURN, cause, DispositionDropped, d.accept)
		}
		dl := newDeadLetter(ReasonUnknownURN, nil, d.queue(), d.attempts, d.c.now())
		text := cause.Error()
		dl.Error = &text
		return d.deadLetter(KindUnknownURN, cause, deadLetterEnvelope(d.env, dl, d.msg, d.queue()))
	}
	return d.finish(KindUnknownURN, cause, DispositionAbandoned, d.abandon)
}
