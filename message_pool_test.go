package artemis

import (
	"context"
	"testing"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
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
	pm, err := pooled(ctx, env, cfg, &p.lastURN)
	if err != nil {
		return err
	}
	if err = sendConfirmed(ctx, s, &pm.msg); err == nil {
		pm.recycle()
	}
	return err
}
