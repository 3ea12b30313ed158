package integration_test

// Contract rules only a broker can show: what Artemis does with the copies
// the library writes.

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// TestIntegrationJMSTopicGatedAndPoisonReachTheSubscriptionsDLQ: a JMS
// topic publisher (the Artemis CLI's producer) sends a message of a newer
// schema version and a body that is not JSON; the Go subscription forwards
// both to its own <queue>.dlq. Its messages carry the annotation
// x-opt-jms-dest 1 (topic): a forwarded copy that kept it would be routed
// as multicast to the anycast DLQ, dropped there and answered accepted,
// and the source accepted with it: lost.
func TestIntegrationJMSTopicGatedAndPoisonReachTheSubscriptionsDLQ(t *testing.T) {
	b, conn, topic := onBroker(t)
	b.RequireCLI(t)
	sub := topic + ".audit"
	errs := newErrorLog()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil }},
		artemis.WithOnError(errs.onError))
	require.NoError(t, err)
	subscribe(t, b.URL, topic, sub, cons)

	ctx, cancel := context.WithTimeout(context.Background(), 3*brokertest.CLITimeout)
	defer cancel()
	produce := func(body, props string) {
		args := []string{"--destination", "topic://" + topic, "--message-count", "1", "--message", body}
		if props != "" {
			args = append(args, "--properties", props)
		}
		out, err := b.CLI(ctx, "producer", args...)
		require.NoError(t, err)
		require.Contains(t, out, "Produced: 1 messages")
	}
	produce("not json", "")
	gatedBody := `{"job":"urn:babel:orders:created","v":2}`
	produce(gatedBody, `[{"type":"string","key":"bq_schema_version","value":"2"}]`)
	for range 2 {
		de := errs.next(t)
		assert.Equal(t, artemis.DispositionDeadLettered, de.Disposition, "%v", de)
	}

	bodies := map[string]bool{}
	r := conn.NewReceiver(sub+".dlq", &brokertest.ReceiverOptions{Credit: 2})
	for range 2 {
		m := conn.Receive(r, arrival)
		if m == nil {
			t.Fatalf("%s holds %d of the 2 copies the broker accepted (%v): the others were dropped", sub+".dlq", len(bodies), bodies)
		}
		conn.Accept(r, m)
		body := bodyOf(m)
		bodies[body] = true
		if m.ApplicationProperties["bq_schema_version"] == "2" {
			assert.Equal(t, gatedBody, body, "the gated message, forwarded as received")
			continue
		}
		var rec struct {
			Raw        string `json:"raw"`
			DeadLetter struct {
				Reason        string `json:"reason"`
				OriginalQueue string `json:"original_queue"`
			} `json:"dead_letter"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &rec), body)
		assert.Equal(t, "not json", rec.Raw)
		assert.Equal(t, "poison", rec.DeadLetter.Reason)
		assert.Equal(t, topic+"::"+sub, rec.DeadLetter.OriginalQueue)
	}
	conn.CloseReceiver(r)
	assertNothingLeft(t, errs, conn, sub+".dlq", topic+".dlq")
}
