package artemis

import (
	"context"
	"sort"

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

// MessageFromContext returns the raw AMQP message being handled, or nil
// outside a handler.
func MessageFromContext(ctx context.Context) *amqp.Message {
	msg, _ := ctx.Value(messageKey{}).(*amqp.Message)
	return msg
}
