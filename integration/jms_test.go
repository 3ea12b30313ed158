package integration_test

// The JMS view, through the Artemis CLI (a JMS client over the CORE
// protocol): what a Java service sees of a message this library published,
// and how this library routes a message a JMS client produced.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// TestIntegrationJMSViewOfAPublishedMessage browses a published message
// with `artemis browser`: a TextMessage whose text is the envelope, JMSType
// the URN, JMSCorrelationID the trace id, and the bq_ properties.
func TestIntegrationJMSViewOfAPublishedMessage(t *testing.T) {
	b, conn, q := onBroker(t)
	b.RequireCLI(t)
	pub := artemis.NewPublisher(conn.NewSender(q), q)
	const urn = "urn:babel:orders:created"
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	env, err := artemis.NewEnvelope(urn, json.RawMessage(`{"order_id":1042,"city":"Zürich","big":12345678901234567890}`),
		artemis.EnvelopeQueue(q))
	require.NoError(t, err)
	body, err := env.Encode()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*brokertest.CLITimeout)
	defer cancel()
	_, err = pub.Publish(ctx, env, artemis.WithHeaders(map[string]string{"traceparent": traceparent}))
	require.NoError(t, err)

	// The selector compares each bq_ property with a string literal: a JMS
	// selector never matches a numeric property against a string, so the
	// message is seen only if all four are JMS string properties.
	const stringProps = "bq_schema_version = '1' AND bq_source_lang = 'go' AND bq_attempts = '0' AND bq_app_id = 'babelqueue'"
	msgs, err := b.Browse(ctx, q, stringProps)
	require.NoError(t, err)
	if len(msgs) == 0 {
		all, err := b.Browse(ctx, q, "")
		require.NoError(t, err)
		t.Fatalf("the selector %q does not match; the queue holds: %+v", stringProps, all)
	}
	require.Len(t, msgs, 1, "the browser sees the one message")
	m := msgs[0]
	assert.True(t, m.IsText, "a JMS TextMessage")
	assert.Equal(t, string(body), m.Text, "getText() is the envelope, byte for byte")
	assert.Equal(t, urn, m.Properties["JMSType"], "JMSType is the URN; dump: %s", m.Dump)
	assert.Equal(t, env.TraceID, m.Properties["JMSCorrelationID"], "JMSCorrelationID is the trace id")
	for k, v := range contractProperties {
		assert.Equal(t, v, m.Properties[k], "property %s", k)
	}
	assert.Equal(t, traceparent, m.Properties["traceparent"], "out-of-band header as a JMS property")
	assert.Equal(t, "ID:AMQP_NO_PREFIX:"+env.Meta.ID, m.Properties["NATIVE_MESSAGE_ID"], "the AMQP message-id is meta.id")
	assert.Contains(t, m.Dump, ":PERSISTENT/", "JMSDeliveryMode PERSISTENT")

	assert.Len(t, conn.Drain(q, ""), 1, "browsing did not consume it")
}

// TestIntegrationJMSProducedMessageIsRouted produces a TextMessage with a
// JMSType, a JMSCorrelationID, the bq_ properties and a BabelQueue body
// through `artemis producer` (what a Java BabelQueue service sends), and
// consumes it with this library's Consumer.
//
// Over AMQP, Artemis 2.40 hands the JMSType over as properties.subject,
// not as x-opt-jms-type; the Consumer routes on x-opt-jms-type, else on the
// body URN (README), so the message reaches the handler for its URN through
// the body's job, which a BabelQueue producer sets to the JMSType.
func TestIntegrationJMSProducedMessageIsRouted(t *testing.T) {
	b, conn, q := onBroker(t)
	b.RequireCLI(t)
	const urn = "urn:babel:orders:created"
	const trace = "9d1c0e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
	const id = "0b7e3c1d-2f4a-4b6c-9d8e-1f2a3b4c5d6e"
	const data = `{"order_id":7,"big":12345678901234567890,"city":"Zürich"}`
	body := fmt.Sprintf(`{"job":%q,"trace_id":%q,"data":%s,"meta":{"id":%q,"queue":%q,"lang":"java","schema_version":1,"created_at":1749132727000},"attempts":0}`,
		urn, trace, data, id, q)

	ctx, cancel := context.WithTimeout(context.Background(), 2*brokertest.CLITimeout)
	defer cancel()
	require.NoError(t, b.Produce(ctx, q, body, []brokertest.Property{
		{Type: "string", Key: "JMSType", Value: urn},
		{Type: "string", Key: "JMSCorrelationID", Value: trace},
		{Type: "string", Key: "bq_schema_version", Value: "1"},
		{Type: "string", Key: "bq_source_lang", Value: "java"},
		{Type: "string", Key: "bq_attempts", Value: "0"},
		{Type: "string", Key: "bq_app_id", Value: "babelqueue"},
	}))

	errs := newErrorLog()
	h := handleOne(t, conn, q, urn, errs)

	require.NotNil(t, h.msg.Properties)
	if assert.NotNil(t, h.msg.Properties.Subject, "JMSType arrives as properties.subject") {
		assert.Equal(t, urn, *h.msg.Properties.Subject, "the JMSType")
	}
	assert.NotContains(t, h.msg.Annotations, artemis.AnnotationJMSType, "Artemis does not map JMSType to x-opt-jms-type")
	assert.Equal(t, trace, h.msg.Properties.CorrelationID, "JMSCorrelationID arrives as correlation-id")
	assert.Equal(t, body, valueString(t, h.msg), "a TextMessage arrives as an AMQP value string")

	assert.Equal(t, urn, h.env.URN)
	assert.Equal(t, trace, h.env.TraceID)
	assert.Equal(t, id, h.env.Meta.ID)
	assert.Equal(t, "java", h.env.Meta.Lang)
	assert.Equal(t, 0, h.env.Attempts, "JMS delivery count 1 is attempts 0")
	assert.Equal(t, data, string(h.env.Data))
	assert.Equal(t, "java", h.msg.ApplicationProperties["bq_source_lang"])
	assert.Equal(t, "1", h.msg.ApplicationProperties["bq_schema_version"])
	assert.NotContains(t, h.headers, "bq_source_lang", "the contract's properties are not out-of-band headers")
	assertNothingLeft(t, errs, conn, q)
}
