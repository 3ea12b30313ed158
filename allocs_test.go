package artemis

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBenchFixtures checks that the benchmarks' inputs and fakes do what the
// benchmarks assume: the round trip gives back the data, the floor reads the
// same fields, the floor message is the projection Publish sends, and
// Handle accepts the routed message through the counting receiver.
func TestBenchFixtures(t *testing.T) {
	for _, data := range []any{benchOrderStruct(), benchOrderMap()} {
		env, err := benchRoundTrip(data)
		require.NoError(t, err)
		assert.Equal(t, benchURN, env.URN)
		assert.Equal(t, benchTrace, env.TraceID)
		assert.JSONEq(t, `{"order_id":1042,"amount":99.9,"currency":"USD","note":"café ☕"}`, string(env.Data))
		m, err := benchFloorJSON(data)
		require.NoError(t, err)
		assert.Equal(t, map[string]any{"order_id": 1042.0, "amount": 99.9, "currency": "USD", "note": "café ☕"}, m)
	}

	body := benchBody(t)
	assert.Contains(t, string(body), `"note":"café ☕"`, "non-ASCII stays UTF-8")
	env, err := benchDecodeValidate(body)
	require.NoError(t, err)
	assert.Equal(t, int64(1749132727000), env.Meta.CreatedAt)

	// The hand-built floor message is the projection Publish sends, and the
	// floor's send goes through the accepting sender.
	want, err := NewMessage(env)
	require.NoError(t, err)
	assert.Equal(t, want, benchFloorMessage(env.URN, env.TraceID, env.Meta.ID, string(body), time.UnixMilli(env.Meta.CreatedAt).UTC()))
	s := &fakelink.Sender{Discard: true}
	require.NoError(t, benchFloorPublish(context.Background(), s, string(body), benchMessageID, time.Now()))
	p := NewPublisher(s, benchQueue)
	id, err := p.Publish(context.Background(), Job(benchURN, benchOrderStruct()))
	require.NoError(t, err)
	assert.NotEmpty(t, id)
	assert.Equal(t, 2, s.Count())

	// Handle settles through the counting receiver.
	c := mustConsumer(t, Handlers{benchURN: benchAcceptOrder})
	r := fakelink.NewCountingReceiver()
	require.NoError(t, c.Handle(context.Background(), r, benchDelivery(t, benchURN)))
	assert.Equal(t, 1, r.Counted().Accepted)
	assert.Equal(t, 1, r.Counted().Total())
}

// TestAllocationBudgets holds the hot paths to the allocation counts the
// benchmarks report, so a change that adds one shows up in go test. A
// message routed to a strategy that reports nothing allocates nothing at
// all: in particular its body is never decoded, which would allocate at
// least the Envelope.
func TestAllocationBudgets(t *testing.T) {
	ctx := context.Background()
	body := benchBody(t)
	routed := mustConsumer(t, Handlers{benchURN: benchAcceptOrder})
	routedMsg := benchDelivery(t, benchURN)
	unknownMsg := benchDelivery(t, benchUnknown)
	unknownMsg.Value = benchPoisonBody
	release := mustConsumer(t, nil, WithUnknownURN(UnknownURNRelease))
	drop := mustConsumer(t, nil, WithUnknownURN(UnknownURNDelete))
	r := fakelink.NewCountingReceiver()
	p := NewPublisher(&fakelink.Sender{Discard: true}, benchQueue)
	structData, mapData := any(benchOrderStruct()), any(benchOrderMap())
	struct1K, map1K := any(benchOrderStruct1K()), any(benchOrderMap1K())
	decoded, err := benchRoundTrip(structData)
	require.NoError(t, err)
	decoded1K, err := benchRoundTrip(struct1K)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		max  float64
		run  func() error
	}{
		// Without the race detector: 8 and 17, the same with 1 KB data (a
		// decoded Data is a copy of its own, no unsafe view: BENCHMARKS.md,
		// "unsafe"); the race detector adds up to three (encoder states
		// sync.Pool dropped).
		{"round trip, struct data", 11, func() error { _, err := benchRoundTrip(structData); return err }},
		{"round trip, map data", 20, func() error { _, err := benchRoundTrip(mapData); return err }},
		{"round trip, 1 KB struct data", 11, func() error { _, err := benchRoundTrip(struct1K); return err }},
		{"round trip, 1 KB map data", 20, func() error { _, err := benchRoundTrip(map1K); return err }},
		// Decode copies the body once for its strings and Data once more
		// (no unsafe view shares them: BENCHMARKS.md, "unsafe"), so decode
		// and validate is 3; a routed Handle decodes a string body in place
		// and copies only Data.
		{"decode and validate", 3, func() error { _, err := benchDecodeValidate(body); return err }},
		// The struct (it escapes through Bind's any) and the two strings
		// Bind stores, currency and note; json.Unmarshal of the same makes
		// seven.
		{"Bind into a struct", 3, func() error { var o benchOrder; return decoded.Bind(&o) }},
		{"Bind into a struct, 1 KB data", 3, func() error { var o benchOrder; return decoded1K.Bind(&o) }},
		{"Handle, routed and accepted", 3, func() error { return routed.Handle(ctx, r, routedMsg) }},
		{"Handle, unknown URN, release", 0, func() error { return release.Handle(ctx, r, unknownMsg) }},
		{"Handle, unknown URN, delete", 0, func() error { return drop.Handle(ctx, r, unknownMsg) }},
		// A fresh message's body is seen as its string without a copy
		// (stringView); the ids draw from the library's batches of
		// randomness, no allocation. Struct data is written in the library's
		// one pass: 13, with the race detector too. Map data goes through
		// json.Marshal: 22 without the race detector; with it, sync.Pool
		// drops some of encoding/json's encoder states, which then cost an
		// allocation each.
		{"Publish", 13, func() error { _, err := p.Publish(ctx, Job(benchURN, structData)); return err }},
		{"Publish, map data", 24, func() error { _, err := p.Publish(ctx, Job(benchURN, mapData)); return err }},
		{"Publish, 1 KB struct data", 13, func() error { _, err := p.Publish(ctx, Job(benchURN, struct1K)); return err }},
		{"Publish, 1 KB map data", 24, func() error { _, err := p.Publish(ctx, Job(benchURN, map1K)); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			allocs := testing.AllocsPerRun(50, func() {
				if e := tc.run(); e != nil {
					err = e
				}
			})
			require.NoError(t, err)
			assert.LessOrEqual(t, allocs, tc.max, "allocations per operation")
		})
	}
}

// TestEnvelopeSize: every consumed message allocates one Envelope, so its
// size is part of the memory budget. 208 bytes is a Go allocation size
// class; a field that pushes it past (the next class is 224) costs 16 bytes
// a message. The unknown meta keys, rare, sit behind a pointer for that reason.
func TestEnvelopeSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Envelope{}), uintptr(208), "Envelope outgrew the 208-byte size class")
}

// TestClientAllocationBudgets holds the Client's paths to the bare ones:
// over the same kind of link (a fake that keeps no message), a
// ClientPublisher's Publish allocates no more than a Publisher's, a
// pipelined receipt costs its Receipt and nothing per message besides
// (no closure, no context, no timer), and a delivery settled through the
// Client's counting receiver allocates what Handle does alone.
func TestClientAllocationBudgets(t *testing.T) {
	ctx := context.Background()
	h, cp := newPublisherHarness(t, nil)
	for _, s := range h.fb.conn(0).sendersTo("orders") {
		s.Discard = true
	}
	bare := NewPublisher(&fakelink.Sender{Discard: true}, "orders")
	data := any(benchOrderStruct())
	publish := func(p *Publisher) func() {
		return func() {
			if _, err := p.Publish(ctx, Job(benchURN, data)); err != nil {
				t.Error(err)
			}
		}
	}
	bareAllocs := testing.AllocsPerRun(200, publish(bare))
	clientAllocs := testing.AllocsPerRun(200, publish(cp.Publisher))
	t.Logf("Publish: Publisher %.0f allocations, ClientPublisher %.0f", bareAllocs, clientAllocs)
	assert.LessOrEqual(t, clientAllocs, bareAllocs, "the ClientPublisher adds no allocation to a publish")
	// Over a link that reads a message only while it is written, as
	// go-amqp's do (the fake is one; attach marks go-amqp's links), the
	// ClientPublisher projects onto pooled messages, as a Publisher over an
	// *amqp.Sender does: fewer allocations than a fresh message.
	senderOf(cp).cur.Load().goAMQP = true
	pooledAllocs := testing.AllocsPerRun(200, publish(cp.Publisher))
	senderOf(cp).cur.Load().goAMQP = false
	t.Logf("Publish: ClientPublisher on pooled messages %.0f allocations", pooledAllocs)
	assert.Less(t, pooledAllocs, bareAllocs, "the ClientPublisher uses the message pool")

	receipt := func(p *Publisher) func() {
		return func() {
			r, err := p.PublishWithReceipt(ctx, Job(benchURN, data))
			if err == nil {
				err = r.Wait(ctx)
			}
			if err != nil {
				t.Error(err)
			}
		}
	}
	bareAllocs = testing.AllocsPerRun(200, receipt(bare))
	clientAllocs = testing.AllocsPerRun(200, receipt(cp.Publisher))
	t.Logf("PublishWithReceipt: Publisher %.0f allocations (resolved at once), ClientPublisher %.0f (resolved by the resolver)", bareAllocs, clientAllocs)
	// The Publisher's receipt over a Sender that answers at once is
	// resolved in the call; the Client's goes through the resolver, whose
	// goroutine may have to start again for it, and its Wait may find it
	// pending and make the channel it waits on.
	assert.LessOrEqual(t, clientAllocs, bareAllocs+2, "a pipelined receipt costs the Client at most a resolver start and a done channel")

	c := mustConsumer(t, Handlers{benchURN: benchAcceptOrder})
	msg := benchDelivery(t, benchURN)
	plain := fakelink.NewCountingReceiver()
	// As the Client attaches it: under a credit window (the link's grants
	// go nowhere here).
	counted := &countingReceiver{linkReceiver: plainLink{plain}, w: newCreditWindow(func(uint32) error { return nil }, 100, DefaultCreditBytes)}
	handle := func(r Receiver) func() {
		return func() {
			if err := c.Handle(ctx, r, msg); err != nil {
				t.Error(err)
			}
		}
	}
	bareAllocs = testing.AllocsPerRun(200, handle(plain))
	clientAllocs = testing.AllocsPerRun(200, handle(counted))
	assert.LessOrEqual(t, clientAllocs, bareAllocs, "Client.Consume's receiver adds no allocation to a delivery")
	assert.True(t, counted.settled.Load())
}

// plainLink is a Receiver with the Close a linkReceiver has.
type plainLink struct{ Receiver }

func (plainLink) Close(context.Context) error { return nil }
