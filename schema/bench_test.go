package schema

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The consume path with a schema against without: run
//
//	go test -run '^$' -bench . -benchmem
//
// and compare Consume/schema with Consume/no-validator: the difference is
// what the check costs (Check alone measures it too), and the target is
// that it costs at most the envelope decode it follows (Decode).
// docs/schemas.md has the figures of one run.

// benchData is the conformance suite's valid-full case.
var benchData = json.RawMessage(`{"order_id":1042,"amount":99.9,"currency":"USD"}`)

func benchMessage(b *testing.B) (*amqp.Message, []byte) {
	b.Helper()
	env, err := artemis.NewEnvelope(conformanceURN, benchData, artemis.EnvelopeQueue("orders"))
	if err != nil {
		b.Fatal(err)
	}
	msg, err := artemis.NewMessage(env)
	if err != nil {
		b.Fatal(err)
	}
	body, err := env.Encode()
	if err != nil {
		b.Fatal(err)
	}
	return msg, body
}

// acceptingReceiver settles every delivery as accepted, and counts any
// other settlement as a failure of the benchmark.
type acceptingReceiver struct{ other int }

func (*acceptingReceiver) Receive(context.Context, *amqp.ReceiveOptions) (*amqp.Message, error) {
	return nil, nil
}
func (*acceptingReceiver) AcceptMessage(context.Context, *amqp.Message) error { return nil }
func (r *acceptingReceiver) ReleaseMessage(context.Context, *amqp.Message) error {
	r.other++
	return nil
}
func (r *acceptingReceiver) ModifyMessage(context.Context, *amqp.Message, *amqp.ModifyMessageOptions) error {
	r.other++
	return nil
}

func BenchmarkConsume(b *testing.B) {
	c := loadConformance(b)
	withSchema, err := New(Bytes(conformanceURN, c.Schema))
	if err != nil {
		b.Fatal(err)
	}
	otherURN, err := New(Bytes("urn:babel:orders:cancelled", c.Schema))
	if err != nil {
		b.Fatal(err)
	}
	handlers := artemis.Handlers{conformanceURN: func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil }}
	for _, bc := range []struct {
		name string
		opts []artemis.ConsumerOption
	}{
		{"no-validator", nil},
		{"schema", []artemis.ConsumerOption{withSchema.ConsumerOption()}},
		{"validator-without-schema-for-the-urn", []artemis.ConsumerOption{otherURN.ConsumerOption()}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cons, err := artemis.NewConsumer(handlers, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			msg, _ := benchMessage(b)
			r := &acceptingReceiver{}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := cons.Handle(ctx, r, msg); err != nil {
					b.Fatal(err)
				}
			}
			if r.other != 0 {
				b.Fatalf("%d deliveries not accepted", r.other)
			}
		})
	}
}

// BenchmarkDecode is the envelope decode the check follows.
func BenchmarkDecode(b *testing.B) {
	_, body := benchMessage(b)
	b.ReportAllocs()
	for b.Loop() {
		env, err := artemis.Decode(body)
		if err != nil {
			b.Fatal(err)
		}
		if err := env.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheck is the check alone: ValidatePayload of the data.
func BenchmarkCheck(b *testing.B) {
	c := loadConformance(b)
	reg, err := New(Bytes(conformanceURN, c.Schema))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := reg.ValidatePayload(context.Background(), conformanceURN, benchData); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNoSchemaCostsNothing: with a validator whose registry has no schema
// for the URN, the consume path allocates what it does without a
// validator (the check is one map lookup).
func TestNoSchemaCostsNothing(t *testing.T) {
	c := loadConformance(t)
	otherURN, err := New(Bytes("urn:babel:orders:cancelled", c.Schema))
	if err != nil {
		t.Fatal(err)
	}
	handlers := artemis.Handlers{conformanceURN: func(context.Context, *artemis.Envelope, *amqp.Message) error { return nil }}
	allocs := func(opts ...artemis.ConsumerOption) float64 {
		cons, err := artemis.NewConsumer(handlers, opts...)
		if err != nil {
			t.Fatal(err)
		}
		env, err := artemis.NewEnvelope(conformanceURN, benchData)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := artemis.NewMessage(env)
		if err != nil {
			t.Fatal(err)
		}
		r := &acceptingReceiver{}
		n := testing.AllocsPerRun(200, func() {
			if err := cons.Handle(context.Background(), r, msg); err != nil {
				t.Fatal(err)
			}
		})
		if r.other != 0 {
			t.Fatalf("%d deliveries not accepted", r.other)
		}
		return n
	}
	without, with := allocs(), allocs(otherURN.ConsumerOption())
	if with != without {
		t.Errorf("a validator without a schema for the URN: %v allocations per message, %v without a validator", with, without)
	}
}

// BenchmarkHostile measures each of hostileShapes against an ordinary
// order of its size in the same run, one after the other in each round,
// so that a loaded machine slows both alike: x-ordinary is the hostile
// shape's time as a multiple of the ordinary order's (the bound
// docs/schemas.md states; BENCHMARKS.md has the figures), ns/op the
// hostile shape's own time.
//
//	go test -run '^$' -bench Hostile -benchtime 20x
func BenchmarkHostile(b *testing.B) {
	reg := ordersRegistry(b)
	ctx := context.Background()
	for _, h := range hostileShapes {
		data := []byte(h.data)
		ordinary := []byte(ordinaryOrder(len(data)))
		b.Run(fmt.Sprintf("%s-%dB", h.name, len(data)), func(b *testing.B) {
			var hostile, usual time.Duration
			for b.Loop() {
				start := time.Now()
				_ = reg.ValidatePayload(ctx, ordersURN, data)
				mid := time.Now()
				_ = reg.ValidatePayload(ctx, ordersURN, ordinary)
				usual += time.Since(mid)
				hostile += mid.Sub(start)
			}
			b.ReportMetric(float64(hostile.Nanoseconds())/float64(b.N), "ns/op")
			b.ReportMetric(float64(hostile)/float64(usual), "x-ordinary")
		})
	}
}
