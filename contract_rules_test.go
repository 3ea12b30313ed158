package artemis

// Contract rules checked one by one where no other test pins them (the
// review's table in docs/contract.md names the test of every rule).

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// TestForwardedCopiesDropTheSourcesRoutingAnnotations: a gated message and
// a poison record are forwarded with the source's annotations, but never
// with the ones Artemis routes by. A JMS topic publisher's message carries
// x-opt-jms-dest 1 (topic); sent on to the anycast <queue>.dlq with it,
// Artemis routes the copy as multicast, finds no multicast queue there,
// drops it and answers accepted: the source was accepted and the message
// lost (CONTRACT.md sections 5 and 6: never accepted on a failed write).
func TestForwardedCopiesDropTheSourcesRoutingAnnotations(t *testing.T) {
	fromTopic := func(msg *amqp.Message) *amqp.Message {
		if msg.Annotations == nil {
			msg.Annotations = amqp.Annotations{}
		}
		msg.Annotations[annotationJMSDest] = int8(1)
		msg.Annotations[annotationRoutingType] = int8(0)
		msg.Annotations["x-opt-jms-msg-type"] = int8(5)
		return msg
	}
	gated := fromTopic(orderMessage(t, 0))
	gated.ApplicationProperties[PropSchemaVersion] = "2"
	for name, msg := range map[string]*amqp.Message{
		"gated":         gated,
		"poison":        fromTopic(rawMessage("not json")),
		"poison object": fromTopic(rawMessage(`{"job":"urn:babel:orders:created"}`)),
	} {
		t.Run(name, func(t *testing.T) {
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { return nil }},
				WithDeadLetterSender(dlq))
			got := handleOne(t, c, newRecorder(), dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			require.Len(t, got.dlq, 1)
			fwd := got.dlq[0]
			assert.NotContains(t, fwd.Annotations, annotationJMSDest, "the source's destination type would route the copy as multicast")
			assert.NotContains(t, fwd.Annotations, annotationRoutingType, "the source's routing type would route the copy by it")
			assert.Equal(t, int8(5), fwd.Annotations["x-opt-jms-msg-type"], "the other annotations ride along")
			assert.Equal(t, int8(1), msg.Annotations[annotationJMSDest], "the source message is not modified")
		})
	}
}
