package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	if m := messageFromContext(context.Background()); m != nil {
		t.Errorf("messageFromContext outside a handler = %v", m)
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
	if messageFromContext(ctx) != msg {
		t.Errorf("messageFromContext did not return the message")
	}
}

func TestHeaders(t *testing.T) {
	u := amqp.UUID{0x7b, 0x3f, 0x9c, 0x2a, 0xe4, 0x1d, 0x4f, 0x88, 0x9b, 0x2a, 0x1c, 0x0d, 0x5e, 0x6f, 0x7a, 0x8b}
	msg := &amqp.Message{ApplicationProperties: map[string]any{
		"string":    "v",
		"padded":    " v ",
		"bool_t":    true,
		"bool_f":    false,
		"int64":     int64(-9007199254740993),
		"int32":     int32(-2147483648),
		"int16":     int16(-300),
		"int8":      int8(-8),
		"int":       12,
		"uint64":    uint64(math.MaxUint64),
		"uint32":    uint32(4294967295),
		"uint16":    uint16(65535),
		"uint8":     uint8(255),
		"float64":   1.5,
		"float64_i": float64(3),
		"float64_b": 1e21,
		"float32":   float32(0.1),
		"time":      time.UnixMilli(1749132727000).In(time.FixedZone("X", 3600)),
		"bytes":     []byte("raw"),
		"uuid":      u,
		"symbol":    amqp.Symbol("sym"),
		"nil":       nil,
		"null":      amqp.Null{},
		"empty":     "",
		"blank":     " \t",
		"blank_b":   []byte("  "),
		"":          "blank key",
		"  ":        "blank key",
		// The contract's, the broker's and JMS's own: never headers.
		PropSchemaVersion:            "1",
		PropAttempts:                 "2",
		PropDuplicateID:              "dup",
		"_AMQ_GROUP_ID":              "g",
		"_AMQ_ROUTING_TYPE":          int8(1),
		"JMSXGroupID":                "g",
		"JMSXDeliveryCount":          int32(3),
		"JMS_AMQP_MA_x-opt-jms-type": "urn:babel:x:y",
		"bq-replay-bypass":           "true",
	}}
	want := HeaderCarrier{
		"string":    "v",
		"padded":    " v ",
		"bool_t":    "true",
		"bool_f":    "false",
		"int64":     "-9007199254740993",
		"int32":     "-2147483648",
		"int16":     "-300",
		"int8":      "-8",
		"int":       "12",
		"uint64":    "18446744073709551615",
		"uint32":    "4294967295",
		"uint16":    "65535",
		"uint8":     "255",
		"float64":   "1.5",
		"float64_i": "3",
		"float64_b": "1e+21",
		"float32":   "0.1",
		"time":      "1749132727000",
		"bytes":     "raw",
		"uuid":      "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",
		"symbol":    "sym",
	}
	got := Headers(msg)
	if !reflect.DeepEqual(got, want) {
		for _, k := range append(got.Keys(), want.Keys()...) {
			if got[k] != want[k] {
				t.Errorf("%q: got %q, want %q", k, got[k], want[k])
			}
		}
		t.Errorf("Headers = %v\nwant %v", got, want)
	}

	if h := Headers(&amqp.Message{}); h == nil || len(h) != 0 {
		t.Errorf("Headers without application properties = %#v, want an empty carrier", h)
	}
	// The projection's own properties are not headers: only the caller's
	// read back, and forwarding them adds nothing of the contract's.
	back := Headers(mustMessage(t, contractPHP(t), WithHeaders(map[string]string{"traceparent": "tp"}), WithDuplicateDetection()))
	wantBack := HeaderCarrier{"traceparent": "tp"}
	if !reflect.DeepEqual(back, wantBack) {
		t.Errorf("Headers of a projection = %v, want %v", back, wantBack)
	}
}

// TestInvalidUTF8HeadersAreRefusedOnPublish: an AMQP string must be valid
// UTF-8 (a peer such as Qpid JMS fails to decode the whole message
// otherwise), so a header whose name or value is not is refused with
// ErrInvalidConfig before anything is sent, the error naming the header.
func TestInvalidUTF8HeadersAreRefusedOnPublish(t *testing.T) {
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":1}`), EnvelopeTraceID(testTrace))
	require.NoError(t, err)
	for _, h := range []map[string]string{{"traceparent": "00-\xff"}, {"bad\xc3": "v"}} {
		_, err := NewMessage(env, WithHeaders(h))
		require.ErrorIs(t, err, ErrInvalidConfig, "%q", h)
		assert.Contains(t, err.Error(), "not valid UTF-8")
		assert.True(t, utf8.ValidString(err.Error()), "the error text is valid UTF-8 itself: %q", err.Error())
	}
	_, err = NewMessage(env, WithHeaders(map[string]string{"traceparent": "00-é"}))
	require.NoError(t, err)
}

// TestDeadLetterCopyRepairsInvalidUTF8: a dead-letter copy must not fail
// for the source's invalid UTF-8: its string properties and the
// dead_letter block's error text are repaired (U+FFFD) on the copy.
func TestDeadLetterCopyRepairsInvalidUTF8(t *testing.T) {
	src := orderMessage(t, 0)
	src.ApplicationProperties["traceparent"] = "00-\xff"
	src.ApplicationProperties["bad\xc3"] = "v"
	env, err := DecodeMessage(src)
	require.NoError(t, err)
	dl := newDeadLetter(ReasonFailed, errors.New("gateway said \xff\xfe"), "orders", 0, time.Now())
	msg := deadLetterEnvelope(env, dl, src, "orders")
	for k, v := range msg.ApplicationProperties {
		assert.True(t, utf8.ValidString(k), "key %q", k)
		if s, ok := v.(string); ok {
			assert.True(t, utf8.ValidString(s), "%s: %q", k, s)
		}
	}
	assert.Equal(t, "00-\uFFFD", msg.ApplicationProperties["traceparent"])
	body, ok := msg.Value.(string)
	require.True(t, ok)
	assert.True(t, utf8.ValidString(body), "%q", body)
	require.NotNil(t, dlqEnvelope(t, msg).DeadLetter.Error)
	assert.True(t, utf8.ValidString(*dlqEnvelope(t, msg).DeadLetter.Error))
}

// TestForwardCopyRepairsInvalidUTF8: the forwarded copy of a poison or
// gated message keeps the source's properties, repaired to valid UTF-8;
// the source's map is left as it was.
func TestForwardCopyRepairsInvalidUTF8(t *testing.T) {
	src := rawMessage("not json")
	src.ApplicationProperties = map[string]any{"traceparent": "00-\xff", "bad\xc3": "v", "n": int64(1)}
	msg := forwardCopy(src, "orders")
	assert.Equal(t, map[string]any{"traceparent": "00-\uFFFD", "bad\uFFFD": "v", "n": int64(1)}, msg.ApplicationProperties)
	assert.Equal(t, "00-\xff", src.ApplicationProperties["traceparent"])
}
