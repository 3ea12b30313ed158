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
