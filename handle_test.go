package artemis

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHandlerSeesReconciledAttemptsAndHeaders(t *testing.T) {
	cases := []struct {
		body  int
		dc    uint32
		want  int
		label string
	}{{0, 0, 0, "(0,0)"}, {0, 2, 2, "(0,2)"}, {2, 5, 5, "(2,5)"}, {5, 1, 5, "(5,1)"}, {4, 0, 4, "(4,0)"}, {3, 3, 3, "(3,3)"}}
	for _, tc := range cases {
		t.Run(tc.label, func(t *testing.T) {
			env, err := NewEnvelope(urnCreated, nil, EnvelopeTraceID(testTrace))
			require.NoError(t, err)
			env.Attempts = tc.body
			msg, err := NewMessage(env, WithHeaders(map[string]string{"traceparent": "00-abc-def-01"}))
			require.NoError(t, err)
			msg.Header.DeliveryCount = tc.dc
			var seen int
			var headers HeaderCarrier
			var raw *amqp.Message
			c := mustConsumer(t, Handlers{urnCreated: func(ctx context.Context, e *Envelope, m *amqp.Message) error {
				seen, headers, raw = e.Attempts, HeadersFromContext(ctx), messageFromContext(ctx)
				return nil
			}}, WithMaxTries(100))
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Equal(t, tc.want, seen)
			assert.Equal(t, "00-abc-def-01", headers.Get("traceparent"))
			assert.Equal(t, HeaderCarrier{"traceparent": "00-abc-def-01"}, headers, "the caller's headers only, not the contract's")
			assert.Equal(t, "babelqueue", raw.ApplicationProperties[PropAppID], "the raw message keeps them")
			assert.Same(t, msg, raw)
		})
	}
}

func TestGiveBackFailureIsLogged(t *testing.T) {
	logs := captureDefaultLog(t)
	c := mustConsumer(t, Handlers{urnCreated: succeeding})
	r := fakelink.NewReceiver(t, "orders")
	r.SettleErr = fakelink.ErrLinkClosed
	msg := r.Track(orderMessage(t, 0))
	c.giveBack(context.Background(), r, msg)
	lines := logs.lines(t)
	require.Len(t, lines, 1)
	assert.Equal(t, "settlement failed", lines[0]["msg"])
	assert.Equal(t, "orders", lines[0]["queue"])
	assert.Equal(t, urnCreated, lines[0]["urn"])
}

// TestDecodeMessageAgreesWithHandle: what DecodeMessage accepts, Handle
// hands to the handler; what it refuses, Handle gates or poisons, for the
// same reason.
func TestDecodeMessageAgreesWithHandle(t *testing.T) {
	noMeta := `{"job":"urn:babel:orders:created","trace_id":"` + testTrace + `","data":{"order_id":1},"attempts":0}`
	noTrace := strings.Replace(fuzzEnvelope, `"trace_id":"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b",`, "", 1)
	v2 := strings.Replace(fuzzEnvelope, `"schema_version":1`, `"schema_version":2`, 1)
	gated := func(v any) *amqp.Message {
		m := rawMessage(fuzzEnvelope)
		m.ApplicationProperties = map[string]any{PropSchemaVersion: v}
		return m
	}
	cases := []struct {
		name string
		msg  *amqp.Message
		kind error // nil: accepted
		why  string
	}{
		{"envelope", rawMessage(fuzzEnvelope), nil, ""},
		{"envelope in data sections", &amqp.Message{Data: [][]byte{[]byte(fuzzEnvelope[:40]), []byte(fuzzEnvelope[40:])}}, nil, ""},
		{"envelope as binary", &amqp.Message{Value: []byte(fuzzEnvelope)}, nil, ""},
		{"bq_schema_version 1", gated("1"), nil, ""},
		{"empty array", rawMessage(`[]`), ErrPoison, "not an object: it is an array"},
		{"array of one envelope", rawMessage("[" + fuzzEnvelope + "]"), ErrPoison, "not an object: it is an array"},
		{"no meta", rawMessage(noMeta), ErrPoison, "meta"},
		{"no trace_id", rawMessage(noTrace), ErrPoison, "trace_id is missing"},
		{"meta.schema_version 2", rawMessage(v2), ErrPoison, "meta.schema_version is 2, want 1"},
		{"plain text", rawMessage("hello"), ErrPoison, ""},
		{"sequence body", &amqp.Message{Sequence: [][]any{{"a"}}}, ErrPoison, "sequence"},
		{"no body", &amqp.Message{}, ErrPoison, "no body"},
		{"bq_schema_version 2", gated("2"), ErrVersionGated, `bq_schema_version is "2", not "1"`},
		{"bq_schema_version int", gated(int32(1)), ErrVersionGated, "not the string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, derr := DecodeMessage(tc.msg)
			if tc.msg.Header == nil {
				tc.msg.Header = &amqp.MessageHeader{}
			}
			called := false
			c, rec, dlq := hostileConsumer(t, func(_ context.Context, e *Envelope, _ *amqp.Message) error {
				called = true
				assert.Equal(t, e, env, "the handler gets the envelope DecodeMessage returned")
				return nil
			})
			got := handleOne(t, c, rec, dlq, tc.msg)
			if tc.kind == nil {
				require.NoError(t, derr)
				assert.True(t, called, "Handle did not call the handler")
				assert.Equal(t, fakelink.Accepted, got.disp)
				assert.Empty(t, got.reports)
				return
			}
			require.ErrorIs(t, derr, tc.kind)
			assert.Nil(t, env)
			var de *DeliveryError
			require.ErrorAs(t, derr, &de)
			assert.Equal(t, DispositionPending, de.Disposition)
			assert.Contains(t, de.Err.Error(), tc.why)
			assert.False(t, called, "Handle called the handler")
			reported := requireReport(t, got, tc.kind, DispositionDeadLettered)
			assert.Equal(t, reported.Err.Error(), de.Err.Error(), "the same reason")
			assert.Equal(t, reported.Kind, de.Kind)
		})
	}
}

func TestDecodeMessageNil(t *testing.T) {
	_, err := DecodeMessage(nil)
	assert.ErrorIs(t, err, ErrPoison)
}

// FuzzDecodeMessageAgreesWithHandle: for any body and bq_schema_version,
// DecodeMessage accepts exactly what Handle hands to a handler, and
// refuses the rest with the kind and reason Handle reports.
func FuzzDecodeMessageAgreesWithHandle(f *testing.F) {
	for _, seed := range []struct{ body, version string }{
		{fuzzEnvelope, ""}, {fuzzEnvelope, "1"}, {fuzzEnvelope, "2"}, {fuzzEnvelope, " "},
		{"[]", ""}, {"[" + fuzzEnvelope + "]", ""}, {"{}", ""}, {"", ""}, {"null", "1"},
		{strings.Replace(fuzzEnvelope, `"schema_version":1`, `"schema_version":2`, 1), ""},
	} {
		f.Add(seed.body, seed.version)
	}
	f.Fuzz(func(t *testing.T, body, version string) {
		msg := rawMessage(body)
		if version != "" {
			msg.ApplicationProperties = map[string]any{PropSchemaVersion: version}
		}
		env, derr := DecodeMessage(msg)
		called := false
		c, rec, dlq := hostileConsumer(t, func(context.Context, *Envelope, *amqp.Message) error {
			called = true
			return nil
		}, WithUnknownURN(UnknownURNDeadLetter))
		got := handleOne(t, c, rec, dlq, msg)
		if derr == nil {
			if env.URN != urnCreated {
				return // routed elsewhere: dead-lettered as an unknown URN, not refused
			}
			require.True(t, called, "DecodeMessage accepted what Handle did not hand over: %v", got.reports)
			return
		}
		require.False(t, called, "Handle handed over what DecodeMessage refused: %v", derr)
		var de *DeliveryError
		require.ErrorAs(t, derr, &de)
		require.Len(t, got.reports, 1)
		var reported *DeliveryError
		require.ErrorAs(t, got.reports[0].err, &reported)
		require.Equal(t, reported.Kind, de.Kind)
		require.Equal(t, reported.Err.Error(), de.Err.Error())
	})
}
