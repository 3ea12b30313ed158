package otel

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func TestPublishMetrics(t *testing.T) {
	tel := newRecorded(t, Config{})
	ok := artemis.NewPublisher(&fakelink.Sender{}, "orders", artemis.WithObserver(tel))
	refused := artemis.NewPublisher(&fakelink.Sender{Outcome: fakelink.Reject}, "orders", artemis.WithObserver(tel))
	for range 3 {
		if _, err := ok.Publish(context.Background(), artemis.Job(urnCreated, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := refused.Publish(context.Background(), artemis.Job(urnCreated, nil)); !errors.Is(err, artemis.ErrNotAccepted) {
		t.Fatalf("Publish: %v", err)
	}
	got := tel.collect(t)
	base := map[string]string{"messaging.system": "activemq", "messaging.destination.name": "orders",
		"messaging.operation.name": "send", "messaging.operation.type": "send"}
	accepted := with(base, "error.type", "")
	if n := find(got, "messaging.client.sent.messages", accepted); n != 3 {
		t.Errorf("sent, accepted: %d, want 3", n)
	}
	if n := find(got, "messaging.client.sent.messages", with(base, "error.type", "not_accepted")); n != 1 {
		t.Errorf("sent, not_accepted: %d, want 1", n)
	}
	if n := find(got, "messaging.client.operation.duration", base); n != 4 {
		t.Errorf("operation.duration count %d, want 4", n)
	}
}

// The settlements of a real Consumer: a success, a failure retried, the
// same message failing again on its last try (dead-lettered), a poison body.
func TestSettlementMetricsOfAConsumer(t *testing.T) {
	tel := newRecorded(t, Config{})
	fail := errors.New("payment gateway timeout")
	cons, err := artemis.NewConsumer(tel.Handlers(artemis.Handlers{
		urnCreated: func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			var v struct{ Fail bool }
			if err := env.Bind(&v); err != nil || v.Fail {
				return fail
			}
			return nil
		},
	}), artemis.WithObserver(tel), artemis.WithMaxTries(2), artemis.WithDeadLetterSender(&fakelink.Sender{}),
		artemis.WithQueue("orders"), artemis.WithOnError(func(context.Context, error, *artemis.Envelope, *amqp.Message) {}))
	if err != nil {
		t.Fatal(err)
	}
	msgOf := func(data any, attempts int) *amqp.Message {
		env, err := artemis.NewEnvelope(urnCreated, data, artemis.EnvelopeQueue("orders"))
		if err != nil {
			t.Fatal(err)
		}
		env.Attempts = attempts
		m, err := artemis.NewMessage(env)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	r := fakelink.NewReceiver(t, "orders")
	for _, m := range []*amqp.Message{
		msgOf(map[string]bool{"fail": false}, 0),
		msgOf(map[string]bool{"fail": true}, 0),
		msgOf(map[string]bool{"fail": true}, 1), // its last try
		{Data: [][]byte{[]byte("not json")}},
	} {
		// Handle returns what it reported: the failures and the poison.
		_ = cons.Handle(context.Background(), r, r.Track(m))
	}
	got := tel.collect(t)
	q := map[string]string{"messaging.system": "activemq", "messaging.destination.name": "orders"}
	for _, tc := range []struct {
		name string
		want map[string]string
		n    int64
	}{
		{"babelqueue.settlements", with(with(q, "babelqueue.disposition", "accepted"), "error.type", ""), 1},
		{"babelqueue.settlements", with(with(q, "babelqueue.disposition", "abandoned"), "error.type", "handler_failed"), 1},
		{"babelqueue.settlements", with(with(q, "babelqueue.disposition", "dead_lettered"), "error.type", "handler_failed"), 1},
		{"babelqueue.settlements", with(with(q, "babelqueue.disposition", "dead_lettered"), "error.type", "poison"), 1},
		{"babelqueue.settlement.duration", q, 4},
		{"babelqueue.dead_letters", with(q, "error.type", "handler_failed"), 1},
		{"babelqueue.dead_letters", with(q, "error.type", "poison"), 1},
		{"babelqueue.retries", with(q, "babelqueue.disposition", "dead_lettered"), 1},
		{"babelqueue.retries", q, 1},
		{"messaging.client.consumed.messages", with(q, "messaging.operation.name", "process"), 4},
		{"messaging.process.duration", with(q, "error.type", ""), 1},
		{"messaging.process.duration", with(q, "error.type", "handler_failed"), 2},
	} {
		if n := find(got, tc.name, tc.want); n != tc.n {
			t.Errorf("%s%v = %d, want %d", tc.name, tc.want, n, tc.n)
		}
	}
}

// Every disposition, and any value the library may add, is carried as its
// String() without a change here; a delivery given back is not consumed.
func TestEveryDispositionIsAnAttributeValue(t *testing.T) {
	tel := newRecorded(t, Config{})
	disps := []artemis.Disposition{artemis.DispositionPending, artemis.DispositionAccepted, artemis.DispositionAbandoned,
		artemis.DispositionReleased, artemis.DispositionDeadLettered, artemis.DispositionDropped, artemis.Disposition(42)}
	for _, d := range disps {
		tel.Settled(artemis.SettleEvent{Queue: "q", Disposition: d, Latency: time.Millisecond})
	}
	tel.Settled(artemis.SettleEvent{Queue: "q", Disposition: artemis.DispositionReleased, Kind: artemis.KindGivenBack})
	got := tel.collect(t)
	seen := map[string]bool{}
	for _, p := range got["babelqueue.settlements"] {
		seen[p.attrs["babelqueue.disposition"]] = true
	}
	for _, d := range disps {
		if !seen[d.String()] {
			t.Errorf("no settlement point with babelqueue.disposition %q", d.String())
		}
	}
	if n := find(got, "babelqueue.settlements", map[string]string{"error.type": "given_back"}); n != 1 {
		t.Errorf("given back settlements %d, want 1", n)
	}
	if n := find(got, "messaging.client.consumed.messages", nil); n != int64(len(disps)) {
		t.Errorf("consumed %d, want %d (not the one given back)", n, len(disps))
	}
}

// with returns m with k set to v ("" : k must be absent).
func with(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}
