// The gate: a delivery whose bq_schema_version is not "1" is forwarded to
// the dead-letter queue as received, or dropped, before anything else.

package artemis

import (
	"fmt"

	"github.com/Azure/go-amqp"
)

// gateVersion reads bq_schema_version before the body is decoded. A missing
// or null property, or a string that is empty or only ASCII whitespace,
// passes. Any other value passes only when it is exactly the string "1",
// never trimmed; a non-string value never does. A non-nil error explains why
// the message is gated.
func gateVersion(msg *amqp.Message) error {
	v, ok := msg.ApplicationProperties[PropSchemaVersion]
	if !ok || v == nil {
		return nil
	}
	if _, isNull := v.(amqp.Null); isNull {
		return nil
	}
	s, isString := v.(string)
	if !isString {
		return fmt.Errorf("%s is a %s, not the string %q", PropSchemaVersion, amqpTypeName(v), "1")
	}
	if s == "1" || isASCIIBlank(s) {
		return nil
	}
	return fmt.Errorf("%s is %q, not %q", PropSchemaVersion, truncate(s), "1")
}

func isASCIIBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
		default:
			return false
		}
	}
	return true
}

// gated settles a message whose bq_schema_version is not "1" on its first
// delivery: forwarded to the DLQ as received, or dropped.
func (d *delivery) gated(cause error) error {
	d.begin()
	if d.c.unknown == UnknownURNDelete || d.c.dlq == nil {
		return d.finish(KindVersionGated, cause, DispositionDropped, d.accept)
	}
	return d.deadLetter(KindVersionGated, cause, forwardCopy(d.msg, d.queue()))
}
