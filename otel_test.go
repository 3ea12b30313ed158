package artemis

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
)

func TestHeaderCarrier(t *testing.T) {
	h := HeaderCarrier{}
	if h.Get("missing") != "" {
		t.Errorf("Get of a missing key is not empty")
	}
	if keys := h.Keys(); keys == nil || len(keys) != 0 {
		t.Errorf("Keys of an empty carrier = %#v", keys)
	}
	h.Set("tracestate", "b")
	h.Set("traceparent", "a")
	h.Set("Baggage", "c")
	h.Set("traceparent", "a2")
	if got := h.Get("traceparent"); got != "a2" {
		t.Errorf("Get after a second Set = %q", got)
	}
	if got := strings.Join(h.Keys(), ","); got != "Baggage,traceparent,tracestate" {
		t.Errorf("Keys = %s, want sorted", got)
	}
	// The carrier goes straight into WithHeaders.
	msg := mustMessage(t, contractPHP(t), WithHeaders(h))
	if msg.ApplicationProperties["traceparent"] != "a2" || msg.ApplicationProperties["Baggage"] != "c" {
		t.Errorf("carrier headers not projected: %v", msg.ApplicationProperties)
	}
}

func TestHeadersFromContext(t *testing.T) {
	if h := HeadersFromContext(context.Background()); h == nil || len(h) != 0 {
		t.Errorf("outside a handler: %#v, want an empty carrier", h)
	}
	if m := MessageFromContext(context.Background()); m != nil {
		t.Errorf("MessageFromContext outside a handler = %v", m)
	}
	h := HeadersFromContext(context.WithValue(context.Background(), messageKey{}, (*amqp.Message)(nil)))
	if h == nil || len(h) != 0 {
		t.Errorf("with a nil message: %#v", h)
	}
	msg := &amqp.Message{ApplicationProperties: map[string]any{"traceparent": "tp", "n": int64(3), "blank": ""}}
	ctx := withMessage(context.Background(), msg)
	if got, want := HeadersFromContext(ctx), (HeaderCarrier{"traceparent": "tp", "n": "3"}); !reflect.DeepEqual(got, want) {
		t.Errorf("HeadersFromContext = %v, want %v", got, want)
	}
	if MessageFromContext(ctx) != msg {
		t.Errorf("MessageFromContext did not return the message")
	}
}
