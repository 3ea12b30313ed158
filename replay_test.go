package artemis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

func replayHeader(v string) PublishOption {
	return WithHeaders(map[string]string{HeaderReplayBypass: v})
}

func TestReplayHeaderValues(t *testing.T) {
	cases := []struct {
		name  string
		value any // the application property; absent when nil
		want  bool
	}{
		{"absent", nil, false},
		{"true", "true", true},
		{"TRUE", "TRUE", true},
		{"padded 1", " 1 ", true},
		{"yes", "yes", true},
		{"any other word", "replay", true},
		{"boolean true", true, true},
		{"integer 1", int64(1), true},
		{"blank", "", false},
		{"spaces", "   ", false},
		{"false", "false", false},
		{"False padded", " False ", false},
		{"0", "0", false},
		{"boolean false", false, false},
		{"integer 0", int32(0), false},
		{"AMQP null", amqp.Null{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := orderMessage(t, 0)
			if tc.value != nil {
				msg.ApplicationProperties[HeaderReplayBypass] = tc.value
			}
			ctx := withMessage(context.Background(), msg)
			assert.Equal(t, tc.want, IsReplay(ctx))
			called := false
			require.NoError(t, BypassExternalEffects(ctx, func() error { called = true; return nil }))
			assert.Equal(t, !tc.want, called, "the external effect ran on a replay, or was skipped without one")
		})
	}
}

func TestReplayOutsideAHandler(t *testing.T) {
	assert.False(t, IsReplay(context.Background()))
	errEffect := errors.New("mail server down")
	assert.ErrorIs(t, BypassExternalEffects(context.Background(), func() error { return errEffect }), errEffect)
	msg := orderMessage(t, 0)
	msg.ApplicationProperties = nil // a message without application properties
	assert.False(t, IsReplay(withMessage(context.Background(), msg)))
}

// TestReplayReachesTheHandler: the Consumer puts the delivery in the
// handler's context, so a published header is seen there; the external
// effect's error is the handler's when it runs.
func TestReplayReachesTheHandler(t *testing.T) {
	errEffect := errors.New("mail server down")
	for _, replay := range []bool{false, true} {
		var sawReplay bool
		h := func(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
			sawReplay = IsReplay(ctx)
			return BypassExternalEffects(ctx, func() error { return errEffect })
		}
		c, rec, dlq := hostileConsumer(t, h, WithMaxTries(100))
		var opts []PublishOption
		if replay {
			opts = append(opts, replayHeader("true"))
		}
		got := handleOne(t, c, rec, dlq, orderMessage(t, 0, opts...))
		assert.Equal(t, replay, sawReplay)
		if replay {
			assert.Equal(t, fakelink.Accepted, got.disp)
		} else {
			assert.Equal(t, fakelink.Failed, got.disp)
			assert.ErrorIs(t, got.ret, errEffect)
		}
	}
}

// replayHandler counts its core and its external effect.
type replayHandler struct {
	core, external int
	fail           bool
}

func (r *replayHandler) handle(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
	r.core++
	if r.fail {
		return errThrown
	}
	return BypassExternalEffects(ctx, func() error { r.external++; return nil })
}

// TestReplayComposesWithIdempotent: a replay of a done id runs again (the
// core, not the external effect) and leaves the id done; a failed replay
// of a done id leaves it done; a replay of an id that never succeeded is
// an ordinary first run.
func TestReplayComposesWithIdempotent(t *testing.T) {
	deliver := func(t *testing.T, c *Consumer, id string, replay bool) fakelink.Disposition {
		t.Helper()
		var opts []PublishOption
		if replay {
			opts = append(opts, replayHeader("true"))
		}
		return handleOne(t, c, newRecorder(), nil, idMessage(t, id, opts...)).disp
	}
	setup := func(t *testing.T) (*replayHandler, *Consumer, *MemoryStore) {
		store := NewMemoryStore()
		h := &replayHandler{}
		c := mustConsumer(t, Handlers{urnCreated: Idempotent(store, h.handle)}, WithMaxTries(100), WithOnError(newRecorder().onError))
		return h, c, store
	}

	t.Run("replay of a done id", func(t *testing.T) {
		h, c, _ := setup(t)
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", false))
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", false)) // a duplicate: skipped
		assert.Equal(t, 1, h.core)
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", true))
		assert.Equal(t, 2, h.core, "the replay was skipped as a duplicate")
		assert.Equal(t, 1, h.external, "the replay repeated the external effect")
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", true))
		assert.Equal(t, 3, h.core, "a second replay is a replay too")
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", false))
		assert.Equal(t, 3, h.core, "after the replay the id is done")
		assert.Equal(t, 1, h.external)
	})
	t.Run("failed replay of a done id", func(t *testing.T) {
		h, c, _ := setup(t)
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", false))
		h.fail = true
		assert.Equal(t, fakelink.Failed, deliver(t, c, "id-A", true))
		assert.Equal(t, 2, h.core)
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", false))
		assert.Equal(t, 2, h.core, "a failed replay unmarked an id that was done")
	})
	t.Run("replay of an id that never succeeded", func(t *testing.T) {
		h, c, _ := setup(t)
		h.fail = true
		assert.Equal(t, fakelink.Failed, deliver(t, c, "id-A", false))
		assert.Equal(t, fakelink.Failed, deliver(t, c, "id-A", true))
		assert.Equal(t, fakelink.Failed, deliver(t, c, "id-A", false), "a failed replay marked the id")
		assert.Equal(t, 3, h.core)
		h.fail = false
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", true))
		assert.Equal(t, 4, h.core)
		assert.Equal(t, 0, h.external)
		assert.Equal(t, fakelink.Accepted, deliver(t, c, "id-A", false))
		assert.Equal(t, 4, h.core, "a successful replay left the id unmarked")
	})
	t.Run("replay of an id in flight waits", func(t *testing.T) {
		store := NewMemoryStore()
		h := &replayHandler{}
		spy := newWaitSpy()
		c := mustConsumer(t, Handlers{urnCreated: Idempotent(store, h.handle, spy.option())})
		held := claimOf(t, store, "id-A", time.Minute, false)
		require.Equal(t, ClaimAcquired, held.Status)
		r := fakelink.NewReceiver(t, "orders")
		msg := r.Track(idMessage(t, "id-A", replayHeader("true")))
		done := make(chan error, 1)
		go func() { done <- c.Handle(context.Background(), r, msg) }()
		spy.await(t, 1)
		select {
		case err := <-done:
			t.Fatalf("the replay did not wait for the delivery in flight: %v", err)
		default:
		}
		require.NoError(t, store.Complete(context.Background(), held))
		require.NoError(t, <-done)
		assert.Equal(t, 1, h.core, "the replay did not run after the first finished")
		assert.Equal(t, 0, h.external)
	})
}
