package artemis

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BenchmarkMessagePool: a publish's message from the pool (the subject)
// against a fresh one (the floor), both building the envelope as Publish
// does and sending over a link that keeps nothing.
func BenchmarkMessagePool(b *testing.B) {
	for _, tc := range []struct {
		name string
		data any
	}{{"struct", benchOrderStruct()}, {"struct-1k", benchOrderStruct1K()}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			s := &fakelink.Sender{Discard: true}
			p := NewPublisher(s, benchQueue)
			var cfg publishConfig
			benchPair(b,
				func() error {
					env, err := NewEnvelope(benchURN, tc.data, EnvelopeQueue(benchQueue))
					if err != nil {
						return err
					}
					msg, err := newMessage(ctx, env, &cfg)
					if err != nil {
						return err
					}
					return sendConfirmed(ctx, s, msg)
				},
				func() error {
					env, err := NewEnvelope(benchURN, tc.data, EnvelopeQueue(benchQueue))
					if err != nil {
						return err
					}
					return p.sendReused(ctx, s, env, &cfg)
				})
		})
	}
}

// sendReused publishes env through s on a pooled message, the steps
// Publisher.publish takes through a path that reuses messages (an
// *amqp.Sender's, or a ClientPublisher's go-amqp link): pooled, the
// confirmed send, and the message back to the pool only after an accepted
// outcome. The tests force the pool with it over links that are fakes.
func (p *Publisher) sendReused(ctx context.Context, s Sender, env *Envelope, cfg *publishConfig) error {
	pm, err := pooled(ctx, env, cfg, &p.lastURN, nil)
	if err != nil {
		return err
	}
	if err = sendConfirmed(ctx, s, &pm.msg); err == nil {
		pm.recycle()
	}
	return err
}

// poolJob is a Job's struct data of the sizes a pooled message's data
// buffer grows and shrinks through.
type poolJob struct {
	Worker int    `json:"worker"`
	I      int    `json:"i"`
	Note   string `json:"note,omitempty"`
}

func poolJobNote(w, i int) string { return strings.Repeat("é☕", (w*37+i*101)%700) }

// jobsOnPooledMessages is a ClientPublisher on a link that reads a message
// only while it is written, as attach marks go-amqp's, and keeps what it
// put on the wire (discard: only counts it): its Jobs' struct data is
// written into the pooled messages' buffers (pooledFor).
func jobsOnPooledMessages(t *testing.T, discard bool, opts ...PublishOption) (*harness, *ClientPublisher) {
	t.Helper()
	h, cp := newPublisherHarness(t, nil, opts...)
	for _, s := range h.fb.conn(0).sendersTo("orders") {
		s.Wire, s.Discard = !discard, discard
	}
	senderOf(cp).cur.Load().goAMQP = true
	require.Nil(t, cp.pooledFor(&publishConfig{payload: &keepingValidator{}}), "a payload check takes the usual way")
	pm := cp.pooledFor(&publishConfig{})
	require.NotNil(t, pm, "the Jobs go onto pooled messages")
	pm.recycle()
	return h, cp
}

// Concurrent Jobs of struct data whose size goes up and down, of map, raw
// and nil data, with and without options: every message on the wire is the
// one newMessage makes of its envelope, carrying its own data.
func TestJobDataOnPooledMessagesIsWhatAFreshProjectionSends(t *testing.T) {
	const workers, each = 8, 120
	h, cp := jobsOnPooledMessages(t, false)
	inWorkers(t, workers, func(w int) error {
		for i := range each {
			var m Outgoing
			switch i % 4 {
			case 0:
				m = Job("urn:pool:struct", poolJob{Worker: w, I: i, Note: poolJobNote(w, i)})
			case 1:
				m = Job("urn:pool:map", map[string]any{"worker": w, "i": i})
			case 2:
				m = Job("urn:pool:raw", json.RawMessage(fmt.Sprintf(`{"worker":%d,"i":%d}`, w, i)))
			default:
				m = Job("urn:pool:traced", &poolJob{Worker: w, I: i, Note: poolJobNote(w, i)},
					EnvelopeTraceID(fmt.Sprintf("trace-%d-%d", w, i)))
			}
			if _, err := cp.Publish(context.Background(), m); err != nil {
				return err
			}
		}
		return nil
	})
	sent := h.sentTo("orders")
	require.Len(t, sent, workers*each)
	seen := make(map[[2]int]bool, len(sent))
	for _, msg := range sent {
		body, ok := msg.Value.(string)
		require.True(t, ok)
		env, err := Decode([]byte(body))
		require.NoError(t, err)
		want, err := newMessage(context.Background(), env, &publishConfig{})
		require.NoError(t, err)
		require.Equal(t, wireDecoded(t, want), msg, "the projection of its own envelope")
		var data poolJob
		require.NoError(t, json.Unmarshal(env.Data, &data))
		key := [2]int{data.Worker, data.I}
		require.False(t, seen[key], "%v sent twice", key)
		seen[key] = true
		switch env.URN {
		case "urn:pool:struct", "urn:pool:traced":
			require.Equal(t, poolJobNote(data.Worker, data.I), data.Note, "%v's own data", key)
		default:
			require.Empty(t, data.Note)
		}
		if env.URN == "urn:pool:traced" {
			require.Equal(t, fmt.Sprintf("trace-%d-%d", data.Worker, data.I), env.TraceID)
		}
	}
}

// A Job refused while its data was being written into the pooled
// message's buffer (a NaN after the fields before it were written; a blank
// URN) sends nothing, and the publishes after it are whole.
func TestJobRefusedOnAPooledMessageLeavesTheNextWhole(t *testing.T) {
	type withFloat struct {
		Note  string  `json:"note"`
		Ratio float64 `json:"ratio"`
	}
	h, cp := jobsOnPooledMessages(t, false)
	for i := range 20 {
		_, err := cp.Publish(context.Background(), Job("urn:pool:nan", withFloat{Note: poolJobNote(1, i), Ratio: math.NaN()}))
		require.ErrorIs(t, err, ErrInvalidEnvelope)
		_, err = cp.Publish(context.Background(), Job(" ", poolJob{I: i}))
		require.ErrorIs(t, err, ErrInvalidEnvelope)
		_, err = cp.Publish(context.Background(), Job("urn:pool:ok", withFloat{Note: poolJobNote(2, i), Ratio: float64(i)}))
		require.NoError(t, err)
	}
	sent := h.sentTo("orders")
	require.Len(t, sent, 20)
	for i, msg := range sent {
		env, err := Decode([]byte(msg.Value.(string)))
		require.NoError(t, err)
		assert.Equal(t, "urn:pool:ok", env.URN)
		assert.JSONEq(t, fmt.Sprintf(`{"note":%q,"ratio":%d}`, poolJobNote(2, i), i), string(env.Data))
	}
}

// With a payload check, which is given the data, a Job's data is bytes of
// its own: what the check saw stays what it was while the publishes after
// it go on, and the data written into a pooled buffer costs a publish none
// of its bytes.
func TestJobDataLeavesThePoolForAPayloadCheck(t *testing.T) {
	keeper := &keepingValidator{}
	h, cp := jobsOnPooledMessages(t, false, WithPayloadValidator(keeper))
	for i := range 40 {
		_, err := cp.Publish(context.Background(), Job("urn:pool:checked", poolJob{I: i, Note: poolJobNote(3, i)}))
		require.NoError(t, err)
	}
	require.Len(t, h.sentTo("orders"), 40)
	require.Len(t, keeper.seen, 40)
	for i, s := range keeper.seen {
		assert.Equal(t, s.copy, string(s.data), "publish %d's data changed after its check", i)
	}

	_, checkedCounted := jobsOnPooledMessages(t, true, WithPayloadValidator(&countingValidator{}))
	_, plain := jobsOnPooledMessages(t, true)
	bytesPerPublish := func(p *ClientPublisher) uint64 {
		const n = 1000
		data := any(benchOrderStruct1K())
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			if _, err := p.Publish(context.Background(), Job(benchURN, data)); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / n
	}
	checked, pooledData := bytesPerPublish(checkedCounted), bytesPerPublish(plain)
	t.Logf("1 KB struct data: %d bytes a publish with a payload check, %d without", checked, pooledData)
	// The data's array is 1,152 bytes (its size class), the Envelope 208.
	// The race detector's sync.Pool drops a quarter of what is put back,
	// and each message dropped takes its buffer and envelope with it: three
	// quarters of them.
	saved := uint64(1250)
	if raceEnabled {
		saved = 900
	}
	assert.Less(t, pooledData+saved, checked, "the data's bytes and the envelope come from the pooled message")
}

// keepingValidator keeps every data it is given, which a PayloadValidator
// must not: to show that it would get bytes of their own.
type keepingValidator struct {
	mu   sync.Mutex
	seen []struct {
		data json.RawMessage
		copy string
	}
}

func (k *keepingValidator) ValidatePayload(_ context.Context, _ string, data json.RawMessage) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen = append(k.seen, struct {
		data json.RawMessage
		copy string
	}{data, string(data)})
	return nil
}

// countingValidator accepts every data, and counts the checks.
type countingValidator struct{ n atomic.Int64 }

func (c *countingValidator) ValidatePayload(context.Context, string, json.RawMessage) error {
	c.n.Add(1)
	return nil
}

// idObserver keeps, by meta.id, the URN of every publish it heard.
type idObserver struct {
	mu   sync.Mutex
	urns map[string]string
}

func (o *idObserver) Settled(SettleEvent) {}
func (o *idObserver) Published(e PublishEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.urns[e.MessageID] = e.URN
}

// A Job's envelope is the pooled message's own and goes back to the pool
// with it, so another goroutine's Job may be written into it at once: what
// Publish and PublishWithReceipt report (the id returned, the receipt's, the
// WithOnOutcome callback's, the Observer's id and URN) is still the
// envelope this publish sent.
func TestWhatAPooledPublishReportsIsItsOwnEnvelopes(t *testing.T) {
	const workers, each = 8, 150
	obs := &idObserver{urns: map[string]string{}}
	var outcomes sync.Map // meta.id: true
	h, cp := jobsOnPooledMessages(t, false, WithObserver(obs),
		WithOnOutcome(func(id string, err error) {
			if err == nil {
				outcomes.Store(id, true)
			}
		}))
	var returned sync.Map // [worker, i]: meta.id
	inWorkers(t, workers, func(w int) error {
		for i := range each {
			m := Job(fmt.Sprintf("urn:pool:w%d", w), poolJob{Worker: w, I: i, Note: poolJobNote(w, i)})
			var id string
			var err error
			if i%2 == 0 {
				id, err = cp.Publish(context.Background(), m)
			} else {
				var r *Receipt
				if r, err = cp.PublishWithReceipt(context.Background(), m); err == nil {
					id, err = r.ID(), r.Wait(context.Background())
				}
			}
			if err != nil {
				return err
			}
			returned.Store([2]int{w, i}, id)
		}
		return nil
	})
	sent := h.sentTo("orders")
	require.Len(t, sent, workers*each)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.urns, workers*each, "one event per publish, each with its own id")
	for _, msg := range sent {
		env, err := Decode([]byte(msg.Value.(string)))
		require.NoError(t, err)
		var data poolJob
		require.NoError(t, json.Unmarshal(env.Data, &data))
		id, ok := returned.Load([2]int{data.Worker, data.I})
		require.True(t, ok)
		require.Equal(t, env.Meta.ID, id, "the id returned is the one sent")
		require.Equal(t, env.Meta.ID, msg.Properties.MessageID)
		require.Equal(t, fmt.Sprintf("urn:pool:w%d", data.Worker), env.URN)
		require.Equal(t, env.URN, obs.urns[env.Meta.ID], "the Observer's URN is the one sent with its id")
		_, ok = outcomes.Load(env.Meta.ID)
		require.True(t, ok, "WithOnOutcome heard the id sent")
	}
}
