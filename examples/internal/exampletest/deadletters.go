package exampletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The messages MakeDeadLetters dead-letters.
const (
	// URNFailing has a handler that always fails: reason failed.
	URNFailing = "urn:babel:orders:created"
	// URNUnknown has no handler: reason unknown_urn.
	URNUnknown = "urn:babel:orders:refunded"
	// PoisonText is not JSON: reason poison.
	PoisonText = "order 9; not json"
	// Traceparent rides the failing message as an out-of-band header.
	Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	// FailingError is the failing handler's error text.
	FailingError = "card declined"
)

// DeadLetters is what MakeDeadLetters put on Queue + ".dlq".
type DeadLetters struct {
	Queue string
	// FailedBody is the failing message exactly as it was published: an
	// envelope from another SDK with unknown keys at the top level and in
	// meta, and an integer above 2^53 in data.
	FailedBody string
	Failed     *artemis.Envelope
	Unknown    *artemis.Envelope
}

// MakeDeadLetters publishes three messages to queue and has a real
// Consumer dead-letter them to <queue>.dlq: one whose handler fails (with
// one try, reason failed), one without a handler (strategy dead_letter,
// reason unknown_urn) and one that is not JSON (reason poison). The two
// envelopes are published with duplicate detection, so their meta.id is
// in the queue's duplicate-id cache, as it is after any publish that used
// WithDuplicateDetection.
func MakeDeadLetters(t testing.TB, url, queue string) DeadLetters {
	t.Helper()
	ctx := Context(t)
	client, err := artemis.Dial(ctx, []string{url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	pub, err := client.Publisher(ctx, queue, artemis.WithDuplicateDetection())
	if err != nil {
		t.Fatal(err)
	}

	ids, err := artemis.NewEnvelope(URNFailing, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := DeadLetters{Queue: queue}
	d.FailedBody = fmt.Sprintf(`{"job":%q,"trace_id":%q,"data":{"order_id":9,"total_micros":12345678901234567890},`+
		`"meta":{"id":%q,"queue":%q,"lang":"java","schema_version":1,"created_at":1749132727000,"tenant":"acme"},`+
		`"attempts":0,"priority":"high"}`, URNFailing, ids.TraceID, ids.Meta.ID, queue)
	if d.Failed, err = artemis.Decode([]byte(d.FailedBody)); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishEnvelope(ctx, d.Failed, artemis.WithHeaders(map[string]string{"traceparent": Traceparent})); err != nil {
		t.Fatal(err)
	}
	if d.Unknown, err = artemis.NewEnvelope(URNUnknown, map[string]int{"order_id": 9}, artemis.EnvelopeQueue(queue)); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.PublishEnvelope(ctx, d.Unknown); err != nil {
		t.Fatal(err)
	}
	Send(t, Session(t, url), queue, &amqp.Message{
		Header: &amqp.MessageHeader{Durable: true, Priority: 4},
		Value:  PoisonText,
	})

	var mu sync.Mutex
	var unexpected []error
	deadLettered := make(chan struct{}, 3)
	fail := func(context.Context, *artemis.Envelope, *amqp.Message) error { return errors.New(FailingError) }
	cons := artemis.NewConsumer(artemis.Handlers{URNFailing: fail},
		artemis.WithMaxTries(1),
		artemis.WithUnknownURN(artemis.UnknownURNDeadLetter),
		artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
			var de *artemis.DeliveryError
			if errors.As(err, &de) && de.Disposition == artemis.DeadLettered {
				deadLettered <- struct{}{}
				return
			}
			mu.Lock()
			unexpected = append(unexpected, err)
			mu.Unlock()
		}))
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Consume(cctx, queue, cons, nil) }()
	for range 3 {
		select {
		case <-deadLettered:
		case <-ctx.Done():
			stop()
			<-done
			t.Fatalf("the consumer did not dead-letter the three messages: %v", ctx.Err())
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(unexpected) > 0 {
		t.Fatalf("the consumer reported: %v", unexpected)
	}
	return d
}
