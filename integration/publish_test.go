package integration_test

// Publishing on a real broker: pipelined receipts, the TTL, priority and
// group options as a JMS peer sees them, a TTL'd message dead-lettered, and
// the pooled-message path's reliance on go-amqp.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// TestIntegrationPublishWithReceiptPipelined writes 2,000 transfers from
// four goroutines without waiting, then waits for every receipt: each is
// accepted, and the queue holds exactly those messages, each body its own.
func TestIntegrationPublishWithReceiptPipelined(t *testing.T) {
	_, conn, q := onBroker(t)
	var outcomes sync.Map
	pub := artemis.NewPublisher(conn.NewSender(q), q, artemis.WithOnOutcome(func(id string, err error) {
		if _, dup := outcomes.LoadOrStore(id, err); dup {
			t.Errorf("outcome of %s reported twice", id)
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	const workers, each = 4, 500
	receipts := publishReceipts(t, ctx, pub, "urn:babel:test:pipelined", workers, each)
	want := map[string]string{}
	for w, rs := range receipts {
		require.Len(t, rs, each)
		for i, r := range rs {
			require.NoError(t, r.Wait(ctx))
			want[r.ID()] = fmt.Sprintf(`{"i":%d,"w":%d}`, i, w)
		}
	}
	n := 0
	outcomes.Range(func(_, v any) bool {
		n++
		assert.Nil(t, v)
		return true
	})
	assert.Equal(t, workers*each, n, "every outcome reported")

	got := conn.Drain(q, "")
	require.Len(t, got, workers*each)
	for _, m := range got {
		env, err := artemis.Decode([]byte(valueString(t, m)))
		require.NoError(t, err)
		assert.Equal(t, want[env.Meta.ID], string(env.Data), "the body of %s", env.Meta.ID)
		assert.Equal(t, env.Meta.ID, m.Properties.MessageID)
		delete(want, env.Meta.ID)
	}
	assert.Empty(t, want)
}

// TestPooledMessageIsNotKeptByGoAMQP proves what the pooled path of
// Publisher relies on (see pooledMessage in message_pool.go), against go-amqp
// on a real link: a message may be overwritten as soon as SendWithReceipt
// returns, before the broker's outcome. It would fail if go-amqp encoded the
// message later (or kept pointers into it): the queue would hold the
// scribbled copies.
func TestPooledMessageIsNotKeptByGoAMQP(t *testing.T) {
	_, conn, q := onBroker(t)
	snd := conn.NewSender(q)
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()

	// One message, overwritten after each write: body, ids, properties,
	// annotations, header.
	const n = 300
	body := make([]byte, 2048)
	subject := ""
	msg := &amqp.Message{
		Header:                &amqp.MessageHeader{Durable: true},
		Properties:            &amqp.MessageProperties{Subject: &subject},
		ApplicationProperties: map[string]any{},
		Annotations:           amqp.Annotations{},
	}
	receipts := make([]amqp.SendReceipt, 0, n)
	for i := range n {
		mark := strconv.Itoa(i)
		for j := range body {
			body[j] = 'a' + byte(i%26)
		}
		msg.Value = mark + ":" + string(body) // a fresh string: go-amqp may only read it during the send
		msg.Data = nil
		msg.Properties.MessageID = "m-" + mark
		subject = "s-" + mark
		msg.ApplicationProperties["i"] = mark
		msg.Annotations[artemis.AnnotationJMSType] = "urn:" + mark
		msg.Header.Priority = uint8(i % 10)
		r, err := snd.SendWithReceipt(ctx, msg, nil)
		require.NoError(t, err)
		receipts = append(receipts, r)
		// Scribble over everything the message points to.
		msg.Properties.MessageID = "scribbled"
		subject = "scribbled"
		msg.ApplicationProperties["i"] = "scribbled"
		msg.Annotations[artemis.AnnotationJMSType] = "scribbled"
		msg.Header.Priority = 0
		msg.Value = "scribbled"
		for j := range body {
			body[j] = '#'
		}
	}
	for _, r := range receipts {
		state, err := r.Wait(ctx)
		require.NoError(t, err)
		require.IsType(t, &amqp.StateAccepted{}, state)
	}
	got := conn.Drain(q, "")
	require.Len(t, got, n)
	seen := map[string]bool{}
	for _, m := range got {
		mark := m.ApplicationProperties["i"].(string)
		i, err := strconv.Atoi(mark)
		require.NoError(t, err, "application property %q", mark)
		assert.Equal(t, "m-"+mark, m.Properties.MessageID)
		assert.Equal(t, "s-"+mark, *m.Properties.Subject)
		assert.Equal(t, "urn:"+mark, m.Annotations[artemis.AnnotationJMSType])
		assert.Equal(t, uint8(i%10), m.Header.Priority)
		assert.Equal(t, mark+":"+strings.Repeat(string(rune('a'+i%26)), len(body)), m.Value)
		seen[mark] = true
	}
	assert.Len(t, seen, n)

	// And the Publisher's own pooled path, pipelined: every message on the
	// broker is the envelope its receipt names.
	pub := artemis.NewPublisher(snd, q)
	ids := map[string]int{}
	var rs []*artemis.Receipt
	for i := range n {
		r, err := pub.PublishWithReceipt(ctx, artemis.Job("urn:babel:test:pool", map[string]any{"i": i, "pad": strings.Repeat("x", i)}))
		require.NoError(t, err)
		ids[r.ID()] = i
		rs = append(rs, r)
	}
	for _, r := range rs {
		require.NoError(t, r.Wait(ctx))
	}
	got = conn.Drain(q, "")
	require.Len(t, got, n)
	for _, m := range got {
		env, err := artemis.Decode([]byte(valueString(t, m)))
		require.NoError(t, err)
		i, ok := ids[env.Meta.ID]
		require.True(t, ok)
		assert.JSONEq(t, fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", i)), string(env.Data))
		assert.Equal(t, env.Meta.ID, m.Properties.MessageID)
		assert.Equal(t, env.TraceID, m.Properties.CorrelationID)
	}
}

// TestIntegrationClientPublisherPooledMessages: a ClientPublisher projects
// envelopes without a duplicate id onto pooled messages, as a Publisher
// over an *amqp.Sender does. Eight goroutines publish, half of them
// pipelined, messages of different sizes; every message on the broker is
// the envelope its publish named, and those with WithDuplicateDetection
// (never pooled, kept for a resend) carry their duplicate id.
func TestIntegrationClientPublisherPooledMessages(t *testing.T) {
	ctx, conn, q, pub := onBrokerClientPublisher(t)

	const workers, each = 8, 60
	var mu sync.Mutex
	ids := map[string]int{} // meta.id -> i
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var rs []*artemis.Receipt
			for k := range each {
				i := w*each + k
				data := map[string]any{"i": i, "pad": strings.Repeat("x", i%97*13)}
				var opts []artemis.PublishOption
				if i%5 == 0 {
					opts = append(opts, artemis.WithDuplicateDetection())
				}
				var id string
				if w%2 == 0 {
					r, err := pub.PublishWithReceipt(ctx, artemis.Job("urn:babel:test:pool", data), opts...)
					if !assert.NoError(t, err) {
						return
					}
					id = r.ID()
					rs = append(rs, r)
				} else {
					var err error
					if id, err = pub.Publish(ctx, artemis.Job("urn:babel:test:pool", data), opts...); !assert.NoError(t, err) {
						return
					}
				}
				mu.Lock()
				ids[id] = i
				mu.Unlock()
			}
			for _, r := range rs {
				assert.NoError(t, r.Wait(ctx))
			}
		})
	}
	wg.Wait()
	require.Len(t, ids, workers*each)
	got := conn.Drain(q, "")
	require.Len(t, got, workers*each)
	for _, m := range got {
		env, err := artemis.Decode([]byte(valueString(t, m)))
		require.NoError(t, err)
		i, ok := ids[env.Meta.ID]
		require.True(t, ok, "meta.id %s was not published", env.Meta.ID)
		delete(ids, env.Meta.ID)
		assert.JSONEq(t, fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", i%97*13)), string(env.Data))
		assert.Equal(t, env.Meta.ID, m.Properties.MessageID)
		assert.Equal(t, env.TraceID, m.Properties.CorrelationID)
		assert.Equal(t, "urn:babel:test:pool", m.Annotations[artemis.AnnotationJMSType])
		_, dup := m.ApplicationProperties[artemis.PropDuplicateID]
		assert.Equal(t, i%5 == 0, dup, "duplicate id on message %d", i)
	}
	assert.Empty(t, ids, "every publish arrived once")
}

// TestIntegrationJMSViewOfTTLPriorityAndGroup browses a message published
// with WithTTL, WithPriority and WithGroupID as a JMS client (`artemis
// browser`): JMSExpiration, JMSPriority and JMSXGroupID.
func TestIntegrationJMSViewOfTTLPriorityAndGroup(t *testing.T) {
	b, conn, q := onBroker(t)
	b.RequireCLI(t)
	pub := artemis.NewPublisher(conn.NewSender(q), q)
	ctx, cancel := context.WithTimeout(context.Background(), 2*brokertest.CLITimeout)
	defer cancel()
	before := time.Now()
	_, err := pub.Publish(ctx, artemis.Job("urn:babel:test:options", nil), artemis.WithTTL(time.Hour), artemis.WithPriority(7), artemis.WithGroupID("customer-42"))
	require.NoError(t, err)
	after := time.Now()
	_, err = pub.Publish(ctx, artemis.Job("urn:babel:test:options", nil))
	require.NoError(t, err)

	// JMS selectors on the JMS headers (the browser's dump does not print
	// them): each matches exactly one of the two messages.
	withOptions := fmt.Sprintf("JMSPriority = 7 AND JMSXGroupID = 'customer-42' AND JMSExpiration >= %d AND JMSExpiration <= %d",
		before.Add(time.Hour).UnixMilli(), after.Add(time.Hour).UnixMilli())
	msgs, err := b.Browse(ctx, q, withOptions)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "selector %s", withOptions)
	t.Logf("JMS view: %s", msgs[0].Dump)
	assert.Contains(t, msgs[0].Dump, "_AMQ_GROUP_ID=customer-42")
	const without = "JMSPriority = 4 AND JMSExpiration = 0 AND JMSXGroupID IS NULL"
	msgs, err = b.Browse(ctx, q, without)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "selector %s: the message without options", without)

	// Over AMQP, a consumer gets them back.
	got := conn.Drain(q, "")
	require.Len(t, got, 2)
	var grouped *amqp.Message
	for _, m := range got {
		if m.Properties.GroupID != nil {
			grouped = m
		}
	}
	require.NotNil(t, grouped)
	assert.Equal(t, "customer-42", *grouped.Properties.GroupID)
	assert.Equal(t, uint8(7), grouped.Header.Priority)
}

// TestIntegrationDeadLetteredTTLMessageDoesNotExpire dead-letters a message
// published with a time to live, priority and group: the DLQ copy on the
// broker has no ttl and no absolute expiry (JMSExpiration 0), and keeps
// the group and the priority.
func TestIntegrationDeadLetteredTTLMessageDoesNotExpire(t *testing.T) {
	b, conn, q, pub := onBrokerPublisher(t)
	const urn = "urn:babel:test:ttl-dlq"
	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	_, err := pub.Publish(ctx, artemis.Job(urn, json.RawMessage(`{"n":1}`)), artemis.WithTTL(10*time.Minute), artemis.WithPriority(6), artemis.WithGroupID("g-1"))
	require.NoError(t, err)

	errs := newErrorLog()
	dlqAddr := q + ".dlq"
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		return errors.New("always fails")
	}}, artemis.WithDeadLetterSender(conn.NewSender(dlqAddr)), artemis.WithMaxTries(1), artemis.WithOnError(errs.onError))
	l := listen(t, conn, q, cons, 1)
	de := errs.next(t)
	require.ErrorIs(t, de, artemis.ErrHandlerFailed)
	l.stop()

	if b.HasCLI() {
		const sel = "JMSExpiration = 0 AND JMSPriority = 6 AND JMSXGroupID = 'g-1'"
		msgs, err := b.Browse(ctx, dlqAddr, sel)
		require.NoError(t, err)
		require.Len(t, msgs, 1, "the DLQ copy as a JMS peer sees it, selector %s", sel)
	}
	m := receiveOn(t, conn, dlqAddr, nil)
	assert.Zero(t, m.Header.TTL, "no ttl on the DLQ copy")
	assert.Nil(t, m.Properties.AbsoluteExpiryTime, "no absolute-expiry-time on the DLQ copy")
	require.NotNil(t, m.Properties.GroupID)
	assert.Equal(t, "g-1", *m.Properties.GroupID)
	assert.Equal(t, uint8(6), m.Header.Priority)
	env, err := artemis.Decode([]byte(valueString(t, m)))
	require.NoError(t, err)
	require.NotNil(t, env.DeadLetter)
	assert.Equal(t, artemis.ReasonFailed, env.DeadLetter.Reason)
	assertEmpty(t, conn, q)
}

// TestIntegrationClientPublisherReceipts pipelines through Client.Publisher:
// the receipts of 500 transfers, written before any is waited on, are all
// accepted, and the queue holds each once.
func TestIntegrationClientPublisherReceipts(t *testing.T) {
	ctx, conn, q, pub := onBrokerClientPublisher(t, artemis.WithDuplicateDetection())
	const n = 500
	rs := make([]*artemis.Receipt, 0, n)
	for i := range n {
		r, err := pub.PublishWithReceipt(ctx, artemis.Job("urn:babel:test:client-receipts", map[string]int{"i": i}))
		require.NoError(t, err)
		rs = append(rs, r)
	}
	ids := map[string]bool{}
	for _, r := range rs {
		require.NoError(t, r.Wait(ctx))
		ids[r.ID()] = true
	}
	got := conn.Drain(q, "")
	require.Len(t, got, n)
	for _, m := range got {
		assert.True(t, ids[m.Properties.MessageID.(string)])
		delete(ids, m.Properties.MessageID.(string))
	}
	assert.Empty(t, ids)
}
