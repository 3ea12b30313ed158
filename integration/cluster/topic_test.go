package cluster_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// Events published to a topic through DialCluster (spread over the
// members) reach every subscription, and each subscription's consumers,
// on every member, handle each event once.
func TestClusterTopicEachSubscriptionGetsEveryEventOnce(t *testing.T) {
	cl := brokertest.RequireCluster(t)
	n := max(volume(t)/10, 300)
	topic := queueName(t, "topic")
	services := []string{"billing", "shipping"}
	tallies := map[string]*tally{}
	for _, svc := range services {
		tl := newTally(n)
		tallies[svc] = tl
		var attached atomic.Int32
		all := make(chan struct{})
		c := dialCluster(t, cl, &artemis.ClientOptions{OnEvent: func(ev artemis.ConnectionEvent) {
			if ev.Kind == artemis.EventConsumerAttached && int(attached.Add(1)) == len(cl.Nodes) {
				close(all)
			}
		}})
		cons := testkit.MustConsumer(t, artemis.Handlers{urn: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			tl.add(env.Meta.ID)
			return nil
		}}, artemis.WithLogger(quiet), artemis.WithConcurrency(4))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Subscribe(ctx, topic, topic+"."+svc, cons) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("Subscribe did not return")
			}
		})
		select {
		case <-all: // the subscription queue exists on every member
		case err := <-done:
			t.Fatalf("Subscribe %s: %v", svc, err)
		case <-time.After(time.Minute):
			t.Fatalf("%s attached on %d of %d members", svc, attached.Load(), len(cl.Nodes))
		}
	}

	c := dialCluster(t, cl, nil)
	p, err := c.TopicPublisher(context.Background(), topic)
	require.NoError(t, err)
	start := time.Now()
	acked := publishAll(t, p, n, 200, func(i int) (any, []artemis.PublishOption) { return order{Seq: i}, nil })
	for _, svc := range services {
		tallies[svc].wait(t, 4*time.Minute)
	}
	took := time.Since(start)
	time.Sleep(time.Second) // a late duplicate would show now
	for _, svc := range services {
		lost, extra, dups := tallies[svc].figures(acked)
		line("topic: %d events published through the cluster Client, subscription %s handled them in %.1f s: lost %d, unknown ids %d, handled twice %d",
			n, svc, took.Seconds(), lost, extra, dups)
		assert.Zero(t, lost, svc)
		assert.Zero(t, extra, svc)
		assert.Zero(t, dups, svc)
	}
}
