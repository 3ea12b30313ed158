package faults_test

import (
	"context"
	"errors"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// faultReceiveAll takes the messages off addr (pre-settled: this is the
// final read) and hands each, with its envelope, to got, until got returns
// false or no message arrives for faultDrainIdle.
func faultReceiveAll(t *testing.T, b *brokertest.Broker, addr string, got func(env *artemis.Envelope, msg *amqp.Message) (more bool)) {
	t.Helper()
	conn := b.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	r, err := conn.Session.NewReceiver(ctx, addr, &amqp.ReceiverOptions{
		SourceCapabilities:        []string{"queue"},
		Credit:                    500,
		RequestedSenderSettleMode: amqp.SenderSettleModeSettled.Ptr(),
	})
	cancel()
	require.NoError(t, err, "attach a receiver to %s", addr)
	for more := true; more; {
		ctx, cancel := context.WithTimeout(context.Background(), faultDrainIdle)
		msg, err := r.Receive(ctx, nil)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		require.NoError(t, err, "receive from %s", addr)
		body, ok := msg.Value.(string)
		require.True(t, ok, "a message on %s without a string value body: %T", addr, msg.Value)
		env, err := artemis.Decode([]byte(body))
		require.NoError(t, err, "a message on %s that is not an envelope: %s", addr, body)
		more = got(env, msg)
	}
	ctx, cancel = context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	_ = r.Close(ctx)
}

// faultDrained is what a drain found on a queue.
type faultDrained struct {
	copies map[string]int // meta.id -> copies
	total  int
	envs   []*artemis.Envelope
}

// faultDrain takes every message off addr (pre-settled: this is the final
// read) until none arrives for faultDrainIdle, and counts them by meta.id.
func faultDrain(t *testing.T, b *brokertest.Broker, addr string) faultDrained {
	t.Helper()
	d := faultDrained{copies: map[string]int{}}
	faultReceiveAll(t, b, addr, func(env *artemis.Envelope, _ *amqp.Message) bool {
		d.copies[env.Meta.ID]++
		d.total++
		d.envs = append(d.envs, env)
		return true
	})
	return d
}
