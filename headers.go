// The out-of-band headers of a message: the application properties that are
// not the contract's, as a HeaderCarrier, and the delivery in the handler's
// context.

package artemis

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
)

// HeaderCarrier holds a message's out-of-band headers (W3C traceparent,
// tracestate, baggage, ...). Its method set matches OpenTelemetry's
// propagation.TextMapCarrier, so a propagator can inject into it before a
// publish (pass it to WithHeaders) and extract from it in a handler, without
// this library importing OpenTelemetry.
type HeaderCarrier map[string]string

// Get returns the value of key, or "" when it is absent.
func (h HeaderCarrier) Get(key string) string { return h[key] }

// Set stores value under key.
func (h HeaderCarrier) Set(key, value string) { h[key] = value }

// Keys returns the header names in sorted order.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type messageKey struct{}

// withMessage records the delivery in the handler's context; the headers are
// built from it only when asked for.
func withMessage(ctx context.Context, msg *amqp.Message) context.Context {
	return context.WithValue(ctx, messageKey{}, msg)
}

// HeadersFromContext returns the out-of-band headers of the message being
// handled: every application property as a string, blanks dropped, less the
// reserved ones (see Headers). Outside a handler it returns an empty carrier.
func HeadersFromContext(ctx context.Context) HeaderCarrier {
	msg, _ := ctx.Value(messageKey{}).(*amqp.Message)
	if msg == nil {
		return HeaderCarrier{}
	}
	return Headers(msg)
}

// messageFromContext returns the raw AMQP message being handled, or nil
// outside a handler.
func messageFromContext(ctx context.Context) *amqp.Message {
	msg, _ := ctx.Value(messageKey{}).(*amqp.Message)
	return msg
}

// Headers returns the message's application properties as out-of-band
// headers: each value rendered as a string, blank keys and values dropped,
// and none of the properties the contract, the broker or JMS own (the
// "bq_" and "bq-" prefixes, "_AMQ_", "JMSX" and "JMS_AMQP_"). What it returns can be passed to WithHeaders on a
// new publish as it is: it never carries the source's duplicate id, group,
// routing or contract fields along.
func Headers(msg *amqp.Message) HeaderCarrier {
	h := make(HeaderCarrier, len(msg.ApplicationProperties))
	for k, v := range msg.ApplicationProperties {
		if isReservedProperty(k) {
			continue
		}
		s := propertyString(v)
		if strings.TrimSpace(k) == "" || strings.TrimSpace(s) == "" {
			continue
		}
		h[k] = s
	}
	return h
}

// isReservedProperty reports whether an application property name belongs
// to the contract (bq_schema_version, bq_attempts, ...: the "bq_" prefix,
// and the family's out-of-band markers with the "bq-" prefix, such as
// bq-replay-bypass, which describe one delivery and must not spread to the
// messages a handler publishes), to Artemis ("_AMQ_": the duplicate id,
// the group and routing fields) or to JMS ("JMSX" names, "JMS_AMQP_" as
// Artemis's AMQP bridge writes them). Headers leaves them out.
func isReservedProperty(name string) bool {
	return strings.HasPrefix(name, "bq_") || strings.HasPrefix(name, "bq-") ||
		strings.HasPrefix(name, "_AMQ_") || strings.HasPrefix(name, "JMSX") ||
		strings.HasPrefix(name, "JMS_AMQP_")
}

func propertyString(v any) string {
	switch x := v.(type) {
	case nil, amqp.Null:
		// amqp.Null is how a sender writes an AMQP null; it arrives as nil.
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case int64, int32, int16, int8, int:
		return strconv.FormatInt(reflect.ValueOf(x).Int(), 10)
	case uint64, uint32, uint16, uint8:
		return strconv.FormatUint(reflect.ValueOf(x).Uint(), 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case time.Time:
		return strconv.FormatInt(x.UnixMilli(), 10)
	case []byte:
		return string(x)
	case amqp.UUID:
		return x.String()
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// checkHeaders refuses a header whose name or value is not valid UTF-8:
// an AMQP string must be, and a peer such as Qpid JMS fails to decode the
// whole message otherwise. The error names the header (quoted), never its
// value.
func checkHeaders(h map[string]string) error {
	for k, v := range h {
		if !utf8.ValidString(k) {
			return fmt.Errorf("%w: WithHeaders: the header name %q is not valid UTF-8", ErrInvalidConfig, k)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: WithHeaders: the value of header %q is not valid UTF-8", ErrInvalidConfig, k)
		}
	}
	return nil
}

// validUTF8 is s with each invalid UTF-8 sequence replaced by U+FFFD: for
// a copy the library writes of a received message (a dead-letter or retry
// copy), which must not fail for what the source carried.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
