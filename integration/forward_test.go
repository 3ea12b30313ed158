package integration_test

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// TestIntegrationForwardedHeadersStoreEveryMessage: a handler that forwards
// its headers, as the docs invite, on two follow-up publishes stores two
// messages. The source was published with duplicate detection and a group,
// so its delivery carries _AMQ_DUPL_ID and the group fields; none of them
// may ride along (Artemis would keep one of the two and answer accepted for
// both).
func TestIntegrationForwardedHeadersStoreEveryMessage(t *testing.T) {
	_, conn, q, pub := onBrokerPublisher(t)
	next := q + ".next"
	const urn = "urn:babel:orders:created"
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	_, err := pub.Publish(ctx, artemis.Job(urn, map[string]int{"order_id": 1}), artemis.WithDuplicateDetection(), artemis.WithGroupID("g-1"), artemis.WithHeaders(map[string]string{"traceparent": "00-aa-bb-01"}))
	require.NoError(t, err)

	follow := artemis.NewPublisher(conn.NewSender(next), next)
	errs := newErrorLog()
	forwarded := make(chan artemis.HeaderCarrier, 1)
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: func(ctx context.Context, _ *artemis.Envelope, _ *amqp.Message) error {
		h := artemis.HeadersFromContext(ctx)
		for i := range 2 {
			if _, err := follow.Publish(ctx, artemis.Job("urn:babel:orders:shipped", map[string]int{"n": i}), artemis.WithHeaders(h)); err != nil {
				return err
			}
		}
		forwarded <- h
		return nil
	}}, artemis.WithOnError(errs.onError))
	l := listen(t, conn, q, cons, 1)
	h := <-forwarded
	l.stop()

	assert.Equal(t, artemis.HeaderCarrier{"traceparent": "00-aa-bb-01"}, h, "only the application's headers")
	got := conn.Drain(next, "")
	require.Len(t, got, 2, "both follow-up messages are stored")
	for _, m := range got {
		assert.Equal(t, "00-aa-bb-01", m.ApplicationProperties["traceparent"], "the trace context rides along")
		assert.NotContains(t, m.ApplicationProperties, artemis.PropDuplicateID)
		assert.True(t, m.Properties == nil || m.Properties.GroupID == nil, "no group carried over")
	}
	assertNothingLeft(t, errs, conn, q)
}
