package integration_test

// Exactly-once effects on a real broker: a republished message (the same
// meta.id, a new broker message) is skipped and accepted by the idempotent
// wrapper; the same message republished as a replay runs again, without its
// external effect.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

// effect is what one call of the wrapped handler did.
type effect struct {
	id       string
	replay   bool
	external bool // the external effect ran
}

func nextEffect(t *testing.T, effects <-chan effect) effect {
	t.Helper()
	select {
	case e := <-effects:
		return e
	case <-time.After(arrival):
		t.Fatalf("the handler was not called within %v", arrival)
		return effect{}
	}
}

func TestIntegrationIdempotentSkipsDuplicatesAndRunsReplays(t *testing.T) {
	_, conn, q, pub := onBrokerPublisher(t)
	const urn = "urn:babel:test:exactly-once"
	errs := newErrorLog()
	effects := make(chan effect, 16)
	store := artemis.NewMemoryStore()
	h := artemis.Idempotent(store, func(ctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
		e := effect{id: env.Meta.ID, replay: artemis.IsReplay(ctx)}
		err := artemis.BypassExternalEffects(ctx, func() error { e.external = true; return nil })
		effects <- e
		return err
	})
	// One worker keeps the queue's order: once the handler saw a sentinel
	// published after a duplicate, the duplicate was settled before it.
	cons := testkit.MustConsumer(t, artemis.Handlers{urn: h}, artemis.WithOnError(errs.onError))
	l := listen(t, conn, q, cons, 4)

	ctx, cancel := context.WithTimeout(context.Background(), arrival)
	defer cancel()
	publish := func(env *artemis.Envelope, opts ...artemis.PublishOption) {
		t.Helper()
		id, err := pub.Publish(ctx, env, opts...)
		require.NoError(t, err)
		require.Equal(t, env.Meta.ID, id)
	}
	sentinel := func() string {
		t.Helper()
		s, err := artemis.NewEnvelope(urn, json.RawMessage(`{"sentinel":true}`), artemis.EnvelopeQueue(q))
		require.NoError(t, err)
		publish(s)
		return s.Meta.ID
	}

	env, _ := publishEnvelope(t, pub, q, urn)
	assert.Equal(t, effect{id: env.Meta.ID, external: true}, nextEffect(t, effects), "the first delivery")

	publish(env) // the same envelope again: a duplicate with the same meta.id
	s1 := sentinel()
	assert.Equal(t, effect{id: s1, external: true}, nextEffect(t, effects), "the duplicate was not skipped")

	publish(env, artemis.WithHeaders(map[string]string{artemis.HeaderReplayBypass: "true"}))
	assert.Equal(t, effect{id: env.Meta.ID, replay: true}, nextEffect(t, effects), "the replay")

	publish(env) // after the replay the id is still done
	s2 := sentinel()
	assert.Equal(t, effect{id: s2, external: true}, nextEffect(t, effects), "the duplicate after the replay was not skipped")

	l.stop()
	select {
	case e := <-effects:
		t.Errorf("an unexpected handler call: %+v", e)
	default:
	}
	// Every delivery, the skipped ones too, was accepted: nothing is back
	// on the queue once the receiver detached, and nothing was reported.
	assertNothingLeft(t, errs, conn, q)
	assert.Equal(t, 3, store.Len(), "the message and the two sentinels are remembered")
}
