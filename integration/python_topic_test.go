package integration_test

// A Python subscriber (the BabelQueue Python SDK, testdata/interop/peer.py)
// on a Go topic: it consumes its subscription queue by its fully qualified
// name topic::subscription, as docs/pubsub.md says a non-Go subscriber does.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

func TestIntegrationPythonSubscriberReceivesAGoTopicPublish(t *testing.T) {
	b, python := pyRequire(t)
	topic := brokertest.Queue(t)
	pySub, goSub := topic+".python", topic+".go"
	const events = 20

	// The subscription queue exists before the Python subscriber attaches
	// (made here by a Go Subscribe of the same name, as a Go instance of
	// the service would): a Python and a Go instance share it.
	ta := newTally()
	mk, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("python-made", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, pySub, mk).stop(t)
	gc, err := artemis.NewConsumer(artemis.Handlers{urnOrderCreated: ta.handler("go", nil)})
	require.NoError(t, err)
	subscribe(t, b.URL, topic, goSub, gc)

	py := pyStart(t, b, python, "consume", "--queue", topic+"::"+pySub, "--urn", urnOrderCreated, "--max", "20", "--idle", "0")
	require.Equal(t, "ready", py.next().Event)

	pub := topicPublisher(t, b.URL, topic)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	trace := pyTrace(t)
	published := map[string]bool{}
	for i := range events {
		id, err := pub.Publish(ctx, artemis.Job(urnOrderCreated, map[string]any{"n": i, "big": 9007199254740993}, artemis.EnvelopeTraceID(trace)),
			artemis.WithHeaders(map[string]string{"region": "eu"}))
		require.NoError(t, err)
		published[id] = true
	}
	lines := py.until("done")
	lines = append(lines, py.finish()...)
	handled := pyEvents(lines, "handled")
	seen := map[string]int{}
	for _, l := range handled {
		assert.Equal(t, "ok", l.Outcome)
		assert.Contains(t, string(l.Envelope), `"big":9007199254740993`)
		env := pyDecodeHandled(t, l)
		assert.Equal(t, urnOrderCreated, env.URN, "routed by its URN")
		assert.Equal(t, topic, env.Meta.Queue)
		assert.Equal(t, trace, env.TraceID)
		assert.Equal(t, artemis.Lang, env.Meta.Lang)
		seen[env.Meta.ID]++
	}
	assert.Len(t, seen, events, "the Python subscriber handled every event")
	for id, n := range seen {
		assert.True(t, published[id], id)
		assert.Equal(t, 1, n, "once: %s", id)
	}
	ta.await(t, "go", events, arrival)
	time.Sleep(quiet)
	assert.Equal(t, events, ta.count("go"), "the Go subscription got each event too, once")
	assert.Zero(t, ta.count("python-made"), "the Go instance that made the subscription was gone")

	// Observed behaviour: the Python SDK attaches without a capability;
	// attached to topic::name when the topic exists and no such queue does,
	// Artemis makes the queue with the address's routing type, multicast:
	// a subscription of its own. (On an address that does not exist yet it
	// would make both anycast: docs/pubsub.md.)
	anycast := "unchecked (no Artemis CLI)"
	if b.HasCLI() {
		fresh := topic + ".fresh"
		pyRun(t, b, python, "consume", "--queue", topic+"::"+fresh, "--urn", urnOrderCreated, "--idle", "1")
		qs := queuesNamed(t, b, fresh)
		require.Len(t, qs, 1, "%+v", qs)
		assert.Equal(t, "MULTICAST", qs[0].RoutingType, "observed: the queue takes the existing address's routing type")
		assert.Equal(t, topic, qs[0].Address)
		anycast = qs[0].RoutingType
	}
	t.Logf("python subscriber on %s::%s: %d events from a Go TopicPublisher, handled %d (distinct %d, none twice), envelope, URN and trace id intact; the Go subscription %d; a Python attach to a missing subscription of the existing topic makes a %s queue",
		topic, pySub, events, len(handled), len(seen), ta.count("go"), anycast)
}
