package integration_test

// Topics across SDKs: a Java JMS topic publisher (the Artemis CLI's JMS
// producer, as the interop peers run it) reaches a Go subscription, and a
// Go topic publish reaches a JMS durable subscriber with the envelope, the
// URN as JMSType and the headers.

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

func TestIntegrationJMSTopicPublishReachesAGoSubscription(t *testing.T) {
	b := brokertest.Require(t)
	b.RequireCLI(t)
	topic := brokertest.Queue(t)
	ta := newTally()
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("go", nil)}, artemis.WithOnlyHandledURNs())
	require.NoError(t, err)
	// OnlyHandledURNs: the broker's selector reads the JMS producer's
	// JMSType too.
	subscribe(t, b.URL, topic, topic+".go", cons)

	const id = "5c1d0e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
	ctx, cancel := context.WithTimeout(context.Background(), 3*brokertest.CLITimeout)
	defer cancel()
	for _, ev := range []struct{ urn, id string }{{urnOrderShipped, "6d1d0e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f"}, {urnOrderCreated, id}} {
		body := fmt.Sprintf(`{"job":%q,"trace_id":"t-1","data":{"order_id":7},"meta":{"id":%q,"queue":%q,"lang":"java","schema_version":1,"created_at":1749132727000},"attempts":0}`,
			ev.urn, ev.id, topic)
		props := `[{"type":"string","key":"JMSType","value":"` + ev.urn + `"},{"type":"string","key":"bq_schema_version","value":"1"},{"type":"string","key":"bq_source_lang","value":"java"}]`
		out, err := b.CLI(ctx, "producer", "--destination", "topic://"+topic, "--message-count", "1", "--message", body, "--properties", props)
		require.NoError(t, err)
		require.Contains(t, out, "Produced: 1 messages")
	}
	ta.await(t, "go", 1, arrival)
	time.Sleep(quiet)
	ta.mu.Lock()
	defer ta.mu.Unlock()
	assert.Equal(t, map[string]int{id: 1}, ta.seen["go"], "the created event, once; the shipped one never delivered")
}

// jmsDump is the part of `artemis consumer --data` output the test reads.
type jmsDump struct {
	Messages []struct {
		Properties []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"properties>property"`
		Body string `xml:"body"`
	} `xml:"message"`
}

func TestIntegrationGoTopicPublishReachesAJMSDurableSubscriber(t *testing.T) {
	b := brokertest.Require(t)
	b.RequireCLI(t)
	topic := brokertest.Queue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*brokertest.CLITimeout)
	defer cancel()
	jms := func(data string) string {
		args := []string{"--destination", "topic://" + topic, "--durable", "--clientID", "bq-" + topic,
			"--break-on-null", "--receive-timeout", "3000", "--message-count", "1", "--silent"}
		if data != "" {
			args = append(args, "--data", data)
		}
		out, err := b.CLI(ctx, "consumer", args...)
		require.NoError(t, err)
		return out
	}
	// The JMS durable subscription exists before the publish, its
	// subscriber gone.
	jms("")

	pub := topicPublisher(t, b.URL, topic)
	id, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"order_id": 7}), artemis.WithHeaders(map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}))
	require.NoError(t, err)

	file := filepath.Join(t.TempDir(), "messages.xml")
	out := jms(file)
	require.Contains(t, out, "Consumed: 1 messages", "the durable subscription kept the event for the JMS subscriber")
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var dump jmsDump
	require.NoError(t, xml.Unmarshal(raw, &dump))
	require.Len(t, dump.Messages, 1)
	m := dump.Messages[0]
	props := map[string]string{}
	for _, p := range m.Properties {
		props[p.Name] = p.Value
	}
	assert.Equal(t, urnOrderCreated, props["JMSType"], "the URN as the JMSType")
	assert.Equal(t, "go", props["bq_source_lang"])
	assert.Equal(t, "1", props["bq_schema_version"])
	assert.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", props["traceparent"], "the header as a JMS property")
	env, err := artemis.Decode([]byte(strings.TrimSpace(m.Body)))
	require.NoError(t, err, "the JMS text body is the envelope")
	assert.Equal(t, id, env.Meta.ID)
	assert.Equal(t, urnOrderCreated, env.URN)
	assert.Equal(t, topic, env.Meta.Queue)
}
