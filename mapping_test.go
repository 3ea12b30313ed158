package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestNewMessageGolden(t *testing.T) {
	redelivered := mustDecode(t, `{"job":"urn:babel:cafés:créé","trace_id":"trace-1","data":{ "a" : 1 },"meta":{"id":"msg-1","queue":"cafés","lang":"python","schema_version":1,"created_at":1749132727001,"host":"w1"},"attempts":4,"x_custom":[1,2]}`)

	dead := fixedEnvelope(t, "urn:babel:orders:created", map[string]int{"order_id": 1042})
	dead.Attempts = 3
	dead.DeadLetter = &DeadLetter{Reason: ReasonFailed, Error: ptr("Payment gateway timeout"), Exception: ptr("*app.GatewayError"),
		FailedAt: 1749132730000, OriginalQueue: "orders", Attempts: 3, Lang: "go"}

	headers := map[string]string{
		"traceparent":       "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"tracestate":        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		"baggage":           "userId=alice,isProduction=false",
		"":                  "blank key",
		"   ":               "space key",
		"empty-value":       "",
		"blank-value":       " \t ",
		"bq_attempts":       "99",
		"bq_source_lang":    "rust",
		"bq_schema_version": "2",
		"bq_app_id":         "someone-else",
		"bq_custom":         "kept: no contract property has this name",
	}

	tests := []struct {
		name string
		env  *Envelope
		opts []PublishOption
	}{
		{name: "contract_php", env: contractPHP(t)},
		{name: "contract_go", env: mustDecode(t, contractExample)},
		{name: "new_envelope", env: fixedEnvelope(t, "urn:babel:orders:created", orderCreated{OrderID: 1042, Customer: "<ACME & Co>"})},
		{name: "redelivered_unknown_keys", env: redelivered},
		{name: "headers", env: contractPHP(t), opts: []PublishOption{WithHeaders(headers)}},
		{name: "delay", env: contractPHP(t), opts: []PublishOption{withClock(fixedClock), WithDelay(90 * time.Second)}},
		{name: "duplicate_detection", env: contractPHP(t), opts: []PublishOption{WithDuplicateDetection()}},
		{name: "all_options", env: mustDecode(t, contractExample), opts: []PublishOption{
			WithHeaders(HeaderCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
			WithDelay(1500 * time.Millisecond), withClock(fixedClock), WithDuplicateDetection(),
		}},
		{name: "dead_letter", env: dead},
	}
	g := newGoldenDir(t, filepath.Join("testdata", "projection"), ".golden")
	for _, tt := range tests {
		g.run(tt.name, func(t *testing.T, golden string) {
			msg := mustMessage(t, tt.env, tt.opts...)
			assertGolden(t, golden, renderMessage(t, msg))

			// The body is exactly the canonical encoding.
			want := mustEncode(t, tt.env)
			if got, ok := msg.Value.(string); !ok || got != string(want) {
				t.Errorf("body %#v, want the string %s", msg.Value, want)
			}
			if msg.Data != nil || msg.Sequence != nil {
				t.Errorf("extra body sections: data %q sequence %v", msg.Data, msg.Sequence)
			}
		})
	}
	g.assertNoOrphans()
}

// TestNewMessageConformance checks what the suite's projection case
// (TestConformanceArtemisProjection) leaves out, on the order-created
// envelope with "lang":"php" (CONTRACT.md section 2): one annotation, no
// hyphen in a property name, the other properties and the body.
func TestNewMessageConformance(t *testing.T) {
	msg := mustMessage(t, contractPHP(t))

	if len(msg.Annotations) != 1 {
		t.Errorf("annotations %v, want exactly x-opt-jms-type", msg.Annotations)
	}
	for k := range msg.ApplicationProperties {
		if strings.Contains(k, "-") {
			t.Errorf("application property %q has a hyphen: not a Java identifier", k)
		}
	}
	p := msg.Properties
	if p == nil {
		t.Fatal("no properties")
	}
	if p.MessageID != "f1e2d3c4-b5a6-4789-90ab-cdef01234567" {
		t.Errorf("message-id %#v", p.MessageID)
	}
	if p.ContentType == nil || *p.ContentType != "application/json" {
		t.Errorf("content-type %v", p.ContentType)
	}
	if p.CreationTime == nil || p.CreationTime.UnixMilli() != 1749132727000 || p.CreationTime.Location() != time.UTC {
		t.Errorf("creation-time %v, want 1749132727000 ms UTC", p.CreationTime)
	}
	if p.Subject == nil || *p.Subject != "urn:babel:orders:created" {
		t.Errorf("subject %v, want the URN (Artemis maps it to JMSType)", p.Subject)
	}
	if p.To != nil || p.ReplyTo != nil || p.GroupID != nil || p.UserID != nil || p.ContentEncoding != nil {
		t.Errorf("unexpected properties: %+v", p)
	}
	if msg.Header == nil || !msg.Header.Durable {
		t.Errorf("header %+v, want durable", msg.Header)
	}
	body, ok := msg.Value.(string)
	if !ok {
		t.Fatalf("body is a %T, want an AMQP value string", msg.Value)
	}
	if wantBody := strings.Replace(contractExample, `"lang":"go"`, `"lang":"php"`, 1); body != wantBody {
		t.Errorf("body\n got: %s\nwant: %s", body, wantBody)
	}
	// The URN, trace id and message id ride the JMS-native slots, never bq_ properties.
	for _, v := range msg.ApplicationProperties {
		if s := v.(string); s == contractTraceID || s == contractMessageID || s == "urn:babel:orders:created" {
			t.Errorf("identity value %q is an application property", s)
		}
	}
}

func TestNewMessageAttemptsProperty(t *testing.T) {
	for _, n := range []int{0, 1, 9, 10, 12345, math.MaxInt64} {
		env := contractPHP(t)
		env.Attempts = n
		msg := mustMessage(t, env)
		if got, want := msg.ApplicationProperties[PropAttempts], fmt.Sprint(n); got != want {
			t.Errorf("attempts %d: bq_attempts %#v, want %q", n, got, want)
		}
	}
}

func TestNewMessageRejects(t *testing.T) {
	tests := []struct {
		name string
		env  *Envelope
	}{
		{"blank job", &Envelope{URN: "  ", TraceID: "t", Data: json.RawMessage(`{}`)}},
		{"empty job", &Envelope{TraceID: "t"}},
		{"array data", &Envelope{URN: "urn:a:b", TraceID: "t", Data: json.RawMessage(`[1]`)}},
		{"null data", &Envelope{URN: "urn:a:b", TraceID: "t", Data: json.RawMessage(`null`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := NewMessage(tt.env)
			if err == nil || !errors.Is(err, ErrInvalidEnvelope) || msg != nil {
				t.Errorf("NewMessage = %v, %v; want nil and an ErrInvalidEnvelope", msg, err)
			}
		})
	}
}

// TestProjectionBoxedValues: the pre-boxed property values are the strings
// the contract wants, and values off the usual path are still rendered.
func TestProjectionBoxedValues(t *testing.T) {
	for _, tc := range []struct {
		version, attempts int
		lang              string
	}{{1, 0, "go"}, {1, 15, "go"}, {1, 16, "php"}, {1, 12345, ""}} {
		env := &Envelope{URN: benchURN, TraceID: benchTrace, Attempts: tc.attempts,
			Meta: Meta{ID: "i", Lang: tc.lang, SchemaVersion: tc.version}}
		msg, err := NewMessage(env)
		require.NoError(t, err)
		assert.Equal(t, map[string]any{
			PropSchemaVersion: strconv.Itoa(tc.version),
			PropSourceLang:    tc.lang,
			PropAttempts:      strconv.Itoa(tc.attempts),
			PropAppID:         AppID,
		}, msg.ApplicationProperties)
	}
	// Values no publish sends (NewMessage refuses them) are rendered all the same.
	assert.Equal(t, "2", schemaVersionProperty(2))
	assert.Equal(t, "-1", attemptsProperty(-1))
}

func TestHostileTenThousandApplicationProperties(t *testing.T) {
	const n = 10_000
	headers := make(map[string]string, n)
	for i := range n {
		headers[fmt.Sprintf("x-header-%05d", i)] = fmt.Sprintf("value-%d", i)
	}
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":1042}`), EnvelopeTraceID(testTrace))
	require.NoError(t, err)
	sent, err := NewMessage(env, WithHeaders(headers))
	require.NoError(t, err)
	msg := wireDecoded(t, sent)
	require.Len(t, msg.ApplicationProperties, n+4)

	var seen HeaderCarrier
	c, rec, dlq := hostileConsumer(t, func(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
		seen = HeadersFromContext(ctx)
		return nil
	})
	got := handleOne(t, c, rec, dlq, msg)
	assert.Equal(t, fakelink.Accepted, got.disp)
	assert.Empty(t, got.reports)
	require.Len(t, seen, n, "every header, none of the four bq_ properties")
	for k, v := range headers {
		if seen[k] != v {
			t.Fatalf("header %s = %q, want %q", k, seen[k], v)
		}
	}
	assert.Empty(t, seen.Get(PropSchemaVersion))
	assert.Equal(t, "1", msg.ApplicationProperties[PropSchemaVersion], "the message keeps them")
	assert.Equal(t, AppID, msg.ApplicationProperties[PropAppID])
}
