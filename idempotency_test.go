package artemis

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// idempotencyManifest is the idempotency block of the vendored conformance
// manifest (testdata/conformance/manifest.json, vendored byte for byte with
// the fixtures its paths name).
type idempotencyManifest struct {
	Idempotency struct {
		DedupKey struct {
			EnvelopeFile string `json:"envelope_file"`
			KeyField     string `json:"key_field"`
			ExpectedKey  string `json:"expected_key"`
		} `json:"dedup_key"`
		Sequences struct {
			Cases []struct {
				Name       string `json:"name"`
				Deliveries []struct {
					MetaID       string `json:"meta_id"`
					ExpectEffect string `json:"expect_effect"`
					Outcome      string `json:"outcome"`
					ForgetBefore bool   `json:"forget_before"`
				} `json:"deliveries"`
				ExpectedEffects int `json:"expected_effects"`
			} `json:"cases"`
		} `json:"sequences"`
	} `json:"idempotency"`
}

func loadIdempotencyManifest(t *testing.T) idempotencyManifest {
	t.Helper()
	var m idempotencyManifest
	require.NoError(t, json.Unmarshal(readConformanceFile(t, "manifest.json"), &m))
	require.NotEmpty(t, m.Idempotency.Sequences.Cases, "the manifest has no idempotency sequences")
	return m
}

// idMessage is an order message whose meta.id is id, with opts.
func idMessage(t testing.TB, id string, opts ...PublishOption) *amqp.Message {
	t.Helper()
	env, err := NewEnvelope(urnCreated, json.RawMessage(`{"order_id":1042}`), EnvelopeTraceID(testTrace), EnvelopeQueue("orders"))
	require.NoError(t, err)
	env.Meta.ID = id
	msg, err := NewMessage(env, opts...)
	require.NoError(t, err)
	return msg
}

var errThrown = errors.New("the handler failed")

// TestIdempotencyConformanceSequences drives each of the suite's sequences
// through one wrapped handler and one store, delivery by delivery, through
// the Consumer: a run calls the handler, a skip does not and is accepted,
// a throw is a failed attempt (redelivered) that leaves the id unmarked.
func TestIdempotencyConformanceSequences(t *testing.T) {
	m := loadIdempotencyManifest(t)
	for _, tc := range m.Idempotency.Sequences.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			store := NewMemoryStore()
			var calls, effects int
			var outcome string
			h := func(context.Context, *Envelope, *amqp.Message) error {
				calls++
				if outcome == "throw" {
					return errThrown
				}
				require.Equal(t, "ok", outcome, "a run delivery needs an outcome")
				effects++
				return nil
			}
			c := mustConsumer(t, IdempotentHandlers(store, Handlers{urnCreated: h}), WithMaxTries(100), WithOnError(newRecorder().onError))
			for i, d := range tc.Deliveries {
				if d.ForgetBefore {
					require.NoError(t, store.Forget(context.Background(), d.MetaID))
				}
				outcome = d.Outcome
				before := calls
				got := handleOne(t, c, newRecorder(), nil, idMessage(t, d.MetaID))
				ran := calls > before
				switch d.ExpectEffect {
				case "run":
					assert.True(t, ran, "delivery %d: the handler was not called", i)
					if d.Outcome == "throw" {
						assert.Equal(t, fakelink.Failed, got.disp, "delivery %d", i)
						assert.ErrorIs(t, got.ret, errThrown, "delivery %d", i)
					} else {
						assert.Equal(t, fakelink.Accepted, got.disp, "delivery %d", i)
					}
				case "skip":
					assert.False(t, ran, "delivery %d: the handler was called", i)
					assert.Equal(t, fakelink.Accepted, got.disp, "delivery %d", i)
					assert.NoError(t, got.ret, "delivery %d", i)
				default:
					t.Fatalf("delivery %d: unknown expect_effect %q", i, d.ExpectEffect)
				}
			}
			// expected_effects counts the handler's invocations (the
			// throwing ones too: throw-leaves-id-unmarked expects 3 for two
			// throws and one success); the successful ones are the effects
			// remembered, one per distinct id whose delivery succeeded.
			assert.Equal(t, tc.ExpectedEffects, calls)
			assert.LessOrEqual(t, effects, calls)
		})
	}
}

// TestIdempotencyConformanceKey: the key is meta.id of the suite's fixture,
// verbatim; trace_id is not the key.
func TestIdempotencyConformanceKey(t *testing.T) {
	m := loadIdempotencyManifest(t)
	k := m.Idempotency.DedupKey
	require.Equal(t, "meta.id", k.KeyField)
	body := readConformanceFile(t, k.EnvelopeFile)
	env, err := Decode(body)
	require.NoError(t, err)
	require.Equal(t, k.ExpectedKey, env.Meta.ID)

	store := NewMemoryStore()
	var effects int
	h := Idempotent(store, func(context.Context, *Envelope, *amqp.Message) error { effects++; return nil })
	for range 2 { // byte-for-byte the same message, twice
		again, err := Decode(body)
		require.NoError(t, err)
		require.NoError(t, h(context.Background(), again, nil))
	}
	assert.Equal(t, 1, effects)
	c, err := store.Claim(context.Background(), k.ExpectedKey, time.Minute, false)
	require.NoError(t, err)
	assert.Equal(t, ClaimDone, c.Status, "the store does not hold meta.id verbatim")

	other, err := Decode(body) // same trace_id, another meta.id: another message
	require.NoError(t, err)
	other.Meta.ID = "a0b1c2d3-0000-4000-8000-000000000001"
	require.Equal(t, env.TraceID, other.TraceID)
	require.NoError(t, h(context.Background(), other, nil))
	assert.Equal(t, 2, effects)

	// Verbatim: an id that differs only in case or spaces is another id.
	for _, id := range []string{" " + k.ExpectedKey, "F1E2D3C4-B5A6-4789-90AB-CDEF01234567"} {
		v, err := Decode(body)
		require.NoError(t, err)
		v.Meta.ID = id
		require.NoError(t, h(context.Background(), v, nil))
	}
	assert.Equal(t, 4, effects)
}

// waitSpy is an IdempotencyOption whose clock tells each time a delivery
// went to wait for a busy id; its timers never fire unless fire sends.
type waitSpy struct {
	waiting chan struct{}
	fire    chan time.Time
}

func newWaitSpy() *waitSpy {
	return &waitSpy{waiting: make(chan struct{}, 4096), fire: make(chan time.Time)}
}

func (w *waitSpy) option() IdempotencyOption {
	return func(i *idempotency) {
		i.after = func(time.Duration) <-chan time.Time {
			select {
			case w.waiting <- struct{}{}:
			default:
			}
			return w.fire
		}
	}
}

// await waits until n waits began, failing after 10 s.
func (w *waitSpy) await(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-w.waiting:
		case <-timeout:
			t.Fatalf("only %d of %d deliveries went to wait", i, n)
		}
	}
}

// TestIdempotentConcurrentDeliveriesOfOneID: 24 deliveries of one id at
// once run the effect once when the first succeeds, and every one is
// accepted only after it did; when the first fails, one waiter runs
// instead and the failed delivery is retried as usual.
func TestIdempotentConcurrentDeliveriesOfOneID(t *testing.T) {
	const n = 24
	for _, firstFails := range []bool{false, true} {
		name := "first succeeds"
		if firstFails {
			name = "first fails"
		}
		t.Run(name, func(t *testing.T) {
			store := NewMemoryStore()
			spy := newWaitSpy()
			var calls, effects atomic.Int64
			var succeeded atomic.Bool
			gate := make(chan struct{})
			h := func(context.Context, *Envelope, *amqp.Message) error {
				if calls.Add(1) == 1 {
					<-gate
					if firstFails {
						return errThrown
					}
				}
				effects.Add(1)
				succeeded.Store(true)
				return nil
			}
			r := fakelink.NewReceiver(t, "orders")
			c := mustConsumer(t, Handlers{urnCreated: Idempotent(store, h, spy.option())}, WithMaxTries(100), WithOnError(newRecorder().onError))
			msgs := make([]*amqp.Message, n)
			var accepted sync.Map // the message: whether the effect was done when it was accepted
			obs := &fakelink.Tap{Receiver: r, OnAccept: func(m *amqp.Message) { accepted.Store(m, succeeded.Load()) }}
			var wg sync.WaitGroup
			for i := range msgs {
				msgs[i] = r.Track(idMessage(t, "id-concurrent"))
				wg.Add(1)
				go func(m *amqp.Message) {
					defer wg.Done()
					_ = c.Handle(context.Background(), obs, m)
				}(msgs[i])
			}
			spy.await(t, n-1)
			assert.Equal(t, int64(1), calls.Load(), "a duplicate ran while the first was in flight")
			close(gate)
			wg.Wait()
			assert.Equal(t, int64(1), effects.Load())
			var acc, failed int
			for _, m := range msgs {
				d, ok := r.Disposition(m)
				require.True(t, ok)
				switch d {
				case fakelink.Accepted:
					acc++
					done, _ := accepted.Load(m)
					assert.True(t, done.(bool), "a delivery was accepted before the effect happened")
				case fakelink.Failed:
					failed++
				default:
					t.Errorf("unexpected disposition %v", d)
				}
			}
			if firstFails {
				assert.Equal(t, int64(2), calls.Load())
				assert.Equal(t, n-1, acc)
				assert.Equal(t, 1, failed)
			} else {
				assert.Equal(t, int64(1), calls.Load())
				assert.Equal(t, n, acc)
			}
			assert.Equal(t, 1, store.Len())
		})
	}
}

// TestIdempotentTakesOverAnExpiredClaim: a delivery waiting on an id
// whose holder hangs takes the claim over once the lease ended.
func TestIdempotentTakesOverAnExpiredClaim(t *testing.T) {
	clock := newStoreClock()
	store := clockedStore(clock)
	spy := newWaitSpy()
	var calls atomic.Int64
	started, hung := make(chan struct{}), make(chan struct{})
	h := Idempotent(store, func(context.Context, *Envelope, *amqp.Message) error {
		if calls.Add(1) == 1 {
			close(started)
			<-hung // the first holder hangs
		}
		return nil
	}, WithClaimLease(time.Minute), spy.option())
	c := mustConsumer(t, Handlers{urnCreated: h})
	r := fakelink.NewReceiver(t, "orders")
	first, second := r.Track(idMessage(t, "id-A")), r.Track(idMessage(t, "id-A"))
	go func() { _ = c.Handle(context.Background(), r, first) }()
	<-started
	done := make(chan error, 1)
	go func() { done <- c.Handle(context.Background(), r, second) }()
	spy.await(t, 1)
	assert.Equal(t, int64(1), calls.Load())
	clock.Advance(time.Minute)
	spy.fire <- clock.Now()
	require.NoError(t, <-done)
	assert.Equal(t, int64(2), calls.Load())
	d, ok := r.Disposition(second)
	require.True(t, ok)
	assert.Equal(t, fakelink.Accepted, d)

	close(hung) // the first holder comes back: its late success is recorded too
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.WaitSettled(ctx, 2))
	d, _ = r.Disposition(first)
	assert.Equal(t, fakelink.Accepted, d)
	assert.Equal(t, ClaimDone, claimOf(t, store, "id-A", time.Minute, false).Status)
}

// TestIdempotentWaiterGivesUpWithItsContext: a delivery waiting on a busy
// id whose context ends fails its attempt (the broker redelivers it later)
// and is not accepted.
func TestIdempotentWaiterGivesUpWithItsContext(t *testing.T) {
	store := NewMemoryStore()
	held := claimOf(t, store, "id-A", time.Minute, false)
	require.Equal(t, ClaimAcquired, held.Status)
	spy := newWaitSpy()
	c, rec, _ := hostileConsumer(t, Idempotent(store, neverCalled(t), spy.option()), WithMaxTries(100))
	r := fakelink.NewReceiver(t, "orders")
	msg := r.Track(idMessage(t, "id-A"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Handle(ctx, r, msg) }()
	spy.await(t, 1)
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	d, _ := r.Disposition(msg)
	assert.Equal(t, fakelink.Failed, d)
	assert.Len(t, rec.all(), 1)
	assert.Equal(t, ClaimBusy, claimOf(t, store, "id-A", time.Minute, false).Status, "the waiter touched the holder's claim")
}

// TestIdempotentSettlement: the wrapper composes with the Consumer's
// settlement: a failing handler's delivery is retried, then dead-lettered
// at the limit, and its id stays unmarked throughout; a panic releases
// the claim and is reported as a panic.
func TestIdempotentSettlement(t *testing.T) {
	store := NewMemoryStore()
	fail := true
	var calls int
	h := Idempotent(store, func(context.Context, *Envelope, *amqp.Message) error {
		calls++
		if fail {
			return errThrown
		}
		return nil
	})
	c, rec, dlq := hostileConsumer(t, h, WithMaxTries(2))

	msg := idMessage(t, "id-A")
	got := handleOne(t, c, rec, dlq, msg)
	assert.Equal(t, fakelink.Failed, got.disp, "below the limit: redelivered")
	assert.ErrorIs(t, got.ret, errThrown)
	assert.Equal(t, ClaimAcquired, releasedClaim(t, store, "id-A"))

	msg = idMessage(t, "id-A")
	msg.Header.DeliveryCount = 1
	got = handleOne(t, c, rec, dlq, msg)
	assert.Equal(t, fakelink.Accepted, got.disp, "at the limit: dead-lettered, then accepted")
	require.Len(t, got.dlq, 1)
	assert.Equal(t, ClaimAcquired, releasedClaim(t, store, "id-A"), "a dead-lettered message's id was marked")

	fail = false // a later delivery (a redrive) succeeds, and is then remembered
	got = handleOne(t, c, rec, dlq, idMessage(t, "id-A"))
	assert.Equal(t, fakelink.Accepted, got.disp)
	got = handleOne(t, c, rec, dlq, idMessage(t, "id-A"))
	assert.Equal(t, fakelink.Accepted, got.disp)
	assert.Equal(t, 3, calls)

	panicky := Idempotent(store, func(context.Context, *Envelope, *amqp.Message) error { panic("boom") })
	pc, prec, pdlq := hostileConsumer(t, panicky, WithMaxTries(100))
	got = handleOne(t, pc, prec, pdlq, idMessage(t, "id-P"))
	assert.Equal(t, fakelink.Failed, got.disp)
	var pe *PanicError
	assert.ErrorAs(t, got.ret, &pe)
	assert.Equal(t, ClaimAcquired, releasedClaim(t, store, "id-P"), "a panic left the id claimed")
}

// releasedClaim claims id and gives it back, returning the claim's status:
// ClaimAcquired when the id was unmarked and free.
func releasedClaim(t *testing.T, s IdempotencyStore, id string) ClaimStatus {
	t.Helper()
	c := claimOf(t, s, id, time.Minute, false)
	if c.Status == ClaimAcquired {
		require.NoError(t, s.Release(context.Background(), c))
	}
	return c.Status
}

// TestIdempotentBlankIDRunsUnchanged: without a usable meta.id every
// delivery runs and the store is not touched.
func TestIdempotentBlankIDRunsUnchanged(t *testing.T) {
	store := NewMemoryStore()
	var calls int
	h := Idempotent(store, func(context.Context, *Envelope, *amqp.Message) error { calls++; return nil })
	for _, id := range []string{"", "  ", ""} {
		env, err := NewEnvelope(urnCreated, nil)
		require.NoError(t, err)
		env.Meta.ID = id
		require.NoError(t, h(context.Background(), env, nil))
	}
	require.NoError(t, h(context.Background(), nil, nil))
	assert.Equal(t, 4, calls)
	assert.Equal(t, 0, store.Len())
}

// failingStore fails the calls it is told to, counting them.
type failingStore struct {
	*MemoryStore
	claimErr, completeErr, releaseErr error
}

func (f *failingStore) Claim(ctx context.Context, id string, lease time.Duration, replay bool) (Claim, error) {
	if f.claimErr != nil {
		return Claim{}, f.claimErr
	}
	return f.MemoryStore.Claim(ctx, id, lease, replay)
}

func (f *failingStore) Complete(ctx context.Context, c Claim) error {
	if f.completeErr != nil {
		return f.completeErr
	}
	return f.MemoryStore.Complete(ctx, c)
}

func (f *failingStore) Release(ctx context.Context, c Claim) error {
	if f.releaseErr != nil {
		return f.releaseErr
	}
	return f.MemoryStore.Release(ctx, c)
}

// TestIdempotentStoreErrors: a failed claim fails the attempt without
// running the handler; a failed Complete still accepts (and is reported);
// a failed Release joins the handler's error.
func TestIdempotentStoreErrors(t *testing.T) {
	errStore := errors.New("store down")
	t.Run("claim", func(t *testing.T) {
		fs := &failingStore{MemoryStore: NewMemoryStore(), claimErr: errStore}
		c, rec, dlq := hostileConsumer(t, Idempotent(fs, neverCalled(t)), WithMaxTries(100))
		got := handleOne(t, c, rec, dlq, idMessage(t, "id-A"))
		assert.Equal(t, fakelink.Failed, got.disp)
		assert.ErrorIs(t, got.ret, errStore)
	})
	t.Run("complete", func(t *testing.T) {
		fs := &failingStore{MemoryStore: NewMemoryStore(), completeErr: errStore}
		var reported []string
		var calls int
		h := Idempotent(fs, func(context.Context, *Envelope, *amqp.Message) error { calls++; return nil },
			WithCompleteError(func(_ context.Context, id string, err error) {
				assert.ErrorIs(t, err, errStore)
				reported = append(reported, id)
			}))
		c, rec, dlq := hostileConsumer(t, h)
		got := handleOne(t, c, rec, dlq, idMessage(t, "id-A"))
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Equal(t, []string{"id-A"}, reported)
		// The claim is kept until its lease ends: a duplicate meanwhile waits.
		assert.Equal(t, ClaimBusy, claimOf(t, fs.MemoryStore, "id-A", time.Minute, false).Status)
		assert.Equal(t, 1, calls)
	})
	t.Run("complete, reported to a default logger that panics", func(t *testing.T) {
		prev := slog.Default()
		slog.SetDefault(slog.New(exitingHandler{panics: true}))
		t.Cleanup(func() { slog.SetDefault(prev) })
		fs := &failingStore{MemoryStore: NewMemoryStore(), completeErr: errStore}
		c, rec, dlq := hostileConsumer(t, Idempotent(fs, succeeding), WithLogger(slog.New(slog.DiscardHandler)))
		got := handleOne(t, c, rec, dlq, idMessage(t, "id-A"))
		assert.Equal(t, fakelink.Accepted, got.disp, "handled: the panic of the line is not the handler's")
		assert.NoError(t, got.ret)
	})
	t.Run("release", func(t *testing.T) {
		fs := &failingStore{MemoryStore: NewMemoryStore(), releaseErr: errStore}
		h := Idempotent(fs, failing(errThrown))
		c, rec, dlq := hostileConsumer(t, h, WithMaxTries(100))
		got := handleOne(t, c, rec, dlq, idMessage(t, "id-A"))
		assert.Equal(t, fakelink.Failed, got.disp)
		assert.ErrorIs(t, got.ret, errThrown)
		assert.ErrorIs(t, got.ret, errStore)
	})
}

// TestIdempotentHandlersWrapsEach: one store for every URN, nil handlers
// still refused by NewConsumer.
func TestIdempotentHandlersWrapsEach(t *testing.T) {
	store := NewMemoryStore()
	var a, b int
	hs := IdempotentHandlers(store, Handlers{
		"urn:babel:a:x": func(context.Context, *Envelope, *amqp.Message) error { a++; return nil },
		"urn:babel:b:x": func(context.Context, *Envelope, *amqp.Message) error { b++; return nil },
	})
	for _, urn := range []string{"urn:babel:a:x", "urn:babel:b:x", "urn:babel:a:x"} {
		env, err := NewEnvelope(urn, nil)
		require.NoError(t, err)
		env.Meta.ID = "id-" + urn
		require.NoError(t, hs[urn](context.Background(), env, nil))
		require.NoError(t, hs[urn](context.Background(), env, nil))
	}
	assert.Equal(t, 1, a)
	assert.Equal(t, 1, b)
	assert.Equal(t, 2, store.Len())

	_, err := NewConsumer(IdempotentHandlers(nil, Handlers{urnCreated: nil}))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewConsumer(Handlers{urnCreated: Idempotent(nil, nil)})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}
