package integration_test

// The round trip: an envelope published and consumed through the broker,
// every field and projection checked. The helpers the package's tests
// share are in helpers_test.go.

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// roundTripData exercises the canonical encoding on the wire: an integer
// above 2^53, characters that must not be HTML-escaped, a slash, and
// non-ASCII text written as UTF-8.
const roundTripData = `{"order_id":1042,"big":12345678901234567890,"note":"<b>café</b> & a/b","city":"Zürich"}`

// assertProjection checks the section 2 projection of env on a message as
// it arrived from the broker.
func assertProjection(t *testing.T, env *artemis.Envelope, got *amqp.Message) {
	t.Helper()
	assert.Equal(t, env.URN, got.Annotations[artemis.AnnotationJMSType], "x-opt-jms-type")
	require.NotNil(t, got.Properties, "properties")
	assert.Equal(t, env.TraceID, got.Properties.CorrelationID, "correlation-id is the trace id, as a string")
	assert.Equal(t, env.Meta.ID, got.Properties.MessageID, "message-id is meta.id, as a string")
	if assert.NotNil(t, got.Properties.CreationTime, "creation-time") {
		assert.Equal(t, env.Meta.CreatedAt, got.Properties.CreationTime.UnixMilli(), "creation-time is meta.created_at")
	}
	if assert.NotNil(t, got.Properties.ContentType, "content-type") {
		assert.Equal(t, "application/json", *got.Properties.ContentType)
	}
	if assert.NotNil(t, got.Header, "header") {
		assert.True(t, got.Header.Durable, "durable")
	}
}

// TestIntegrationPublishConsumeRoundTrip sends an envelope through the
// Publisher's link and reads it back raw: the body is byte-identical to
// the canonical encoding and the projection survives the broker.
func TestIntegrationPublishConsumeRoundTrip(t *testing.T) {
	_, conn, q := onBroker(t)
	sender := conn.NewSender(q)
	pub := artemis.NewPublisher(sender, q)
	const urn = "urn:babel:orders:created"
	const trace = "7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b"

	env, err := artemis.NewEnvelope(urn, json.RawMessage(roundTripData),
		artemis.EnvelopeQueue(q), artemis.EnvelopeTraceID(trace))
	require.NoError(t, err)
	encoded, err := env.Encode()
	require.NoError(t, err)
	want := string(encoded)
	projected, err := artemis.NewMessage(env)
	require.NoError(t, err)
	require.Equal(t, want, valueString(t, projected), "NewMessage carries the canonical encoding")
	assert.Contains(t, want, `"note":"<b>café</b> & a/b"`, "no HTML escaping, no escaped slash, UTF-8")
	assert.Contains(t, want, `"big":12345678901234567890`)

	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	id, err := pub.Publish(ctx, env)
	require.NoError(t, err)
	require.Equal(t, env.Meta.ID, id, "Publish of an envelope returns meta.id")

	got := receiveOn(t, conn, q, nil)
	assert.Equal(t, want, valueString(t, got), "the body is byte-identical after the broker")
	assertProjection(t, env, got)
	assert.Equal(t, uint32(0), got.Header.DeliveryCount, "first delivery")
	assert.Equal(t, contractProperties, got.ApplicationProperties,
		"exactly the four bq_ application properties, all strings")
	assertEmpty(t, conn, q)
}

// TestIntegrationPublishListenRoundTrip publishes with Publisher.Publish and
// consumes with Consumer.Listen: the handler sees the envelope, the
// reconciled attempts and the out-of-band headers.
func TestIntegrationPublishListenRoundTrip(t *testing.T) {
	_, conn, q := onBroker(t)
	pub := artemis.NewPublisher(conn.NewSender(q), q)
	const urn = "urn:babel:orders:created"
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	id, err := pub.Publish(ctx, artemis.Job(urn, json.RawMessage(roundTripData), artemis.EnvelopeTraceID("  trace-abc-123  ")), artemis.WithHeaders(map[string]string{"traceparent": traceparent}))
	require.NoError(t, err)

	errs := newErrorLog()
	h := handleOne(t, conn, q, urn, errs)

	assert.Equal(t, urn, h.env.URN)
	assert.Equal(t, "trace-abc-123", h.env.TraceID, "the trace id is trimmed and reused")
	assert.Equal(t, id, h.env.Meta.ID, "Publish returned meta.id")
	assert.Equal(t, q, h.env.Meta.Queue)
	assert.Equal(t, "go", h.env.Meta.Lang)
	assert.Equal(t, 1, h.env.Meta.SchemaVersion)
	assert.Equal(t, 0, h.env.Attempts)
	assert.Nil(t, h.env.DeadLetter)
	assert.Equal(t, roundTripData, string(h.env.Data), "data bytes survive, big integer included")
	var order struct {
		OrderID int64  `json:"order_id"`
		City    string `json:"city"`
	}
	require.NoError(t, h.env.Bind(&order))
	assert.Equal(t, int64(1042), order.OrderID)
	assert.Equal(t, "Zürich", order.City)

	assertProjection(t, h.env, h.msg)
	body := valueString(t, h.msg)
	reencoded, err := h.env.Encode()
	require.NoError(t, err)
	assert.Equal(t, body, string(reencoded), "the published body is the canonical encoding")

	for k, v := range contractProperties {
		assert.Equal(t, v, h.msg.ApplicationProperties[k], "the contract's property %s on the message", k)
	}
	assert.Equal(t, artemis.HeaderCarrier{"traceparent": traceparent}, h.headers,
		"out-of-band headers: the application's properties as strings, none of the contract's")
	assertNothingLeft(t, errs, conn, q)
}
