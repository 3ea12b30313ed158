// Reading the body: an AMQP value holding a string or binary, or data
// sections, as the string the envelope decoder reads; any other body is
// rendered as text for the poison record.

package artemis

import (
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/go-amqp"
)

var errNoBody = errors.New("the message has no body")

// bodyKind says which body section a message carried.
type bodyKind int

const (
	bodyString bodyKind = iota // AMQP value holding a string
	bodyBinary                 // AMQP value holding binary
	bodyData                   // one or more data sections
)

// readBody returns the body as a string, without copying a string value: an
// AMQP value holding a string or binary, or the data sections concatenated.
// Anything else is poison.
func readBody(msg *amqp.Message) (string, bodyKind, error) {
	switch {
	case msg.Value != nil:
		switch v := msg.Value.(type) {
		case string:
			return v, bodyString, nil
		case []byte:
			return string(v), bodyBinary, nil
		}
		return "", 0, fmt.Errorf("the body is an AMQP value of type %s, not a string or binary", amqpTypeName(msg.Value))
	case len(msg.Data) == 1:
		return string(msg.Data[0]), bodyData, nil
	case len(msg.Data) > 1:
		n := 0
		for _, d := range msg.Data {
			n += len(d)
		}
		var b strings.Builder // one copy, handed over as the string
		b.Grow(n)
		for _, d := range msg.Data {
			b.Write(d)
		}
		return b.String(), bodyData, nil
	case len(msg.Sequence) > 0:
		return "", 0, errors.New("the body is an AMQP sequence section")
	}
	return "", 0, errNoBody
}

func amqpTypeName(v any) string {
	switch v.(type) {
	case amqp.Null:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// unreadableBody renders a body that is not a string, binary or data
// section as text for the poison record, so the DLQ still shows it.
func unreadableBody(msg *amqp.Message) string {
	switch {
	case msg.Value != nil:
		return fmt.Sprint(msg.Value)
	case len(msg.Sequence) > 0:
		return fmt.Sprint(msg.Sequence)
	}
	return ""
}
