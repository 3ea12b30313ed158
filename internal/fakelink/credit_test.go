package fakelink

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreditReceiverHoldsAtMostCreditUnsettled(t *testing.T) {
	ring := []*amqp.Message{amqp.NewMessage([]byte("a")), amqp.NewMessage([]byte("b"))}
	r := NewCreditReceiver(ring, 2, 3)
	ctx := context.Background()

	m1, err := r.Receive(ctx, nil)
	require.NoError(t, err)
	m2, err := r.Receive(ctx, nil)
	require.NoError(t, err)
	assert.Same(t, ring[0], m1)
	assert.Same(t, ring[1], m2)

	// Both units are out: the third delivery waits for a settlement.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = r.Receive(short, nil)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, r.AcceptMessage(ctx, m1))
	m3, err := r.Receive(ctx, nil)
	require.NoError(t, err)
	assert.Same(t, ring[0], m3, "the ring starts over")

	select {
	case <-r.Done():
		t.Fatal("Done closed before limit settlements")
	default:
	}
	require.NoError(t, r.ReleaseMessage(ctx, m2))
	require.NoError(t, r.ModifyMessage(ctx, m3, nil))
	assert.Equal(t, 3, r.Settled())
	select {
	case <-r.Done():
	default:
		t.Fatal("Done not closed after limit settlements")
	}

	// Past the limit Receive hands out nothing until its context ends.
	short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = r.Receive(short, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestTapCallsItsHooksAndKeepsTheReceiversChecks(t *testing.T) {
	fr := NewReceiver(t, "orders")
	var received, accepted []*amqp.Message
	tap := &Tap{Receiver: fr,
		OnReceive: func(m *amqp.Message) { received = append(received, m) },
		OnAccept: func(m *amqp.Message) {
			_, settled := fr.Disposition(m)
			assert.False(t, settled, "OnAccept runs before the Receiver records the accept")
			accepted = append(accepted, m)
		},
	}
	m := amqp.NewMessage([]byte("x"))
	fr.Push(m)
	got, err := tap.Receive(context.Background(), nil)
	require.NoError(t, err)
	require.NoError(t, tap.AcceptMessage(context.Background(), got))
	assert.Equal(t, []*amqp.Message{got}, received)
	assert.Equal(t, []*amqp.Message{got}, accepted)
	d, ok := fr.Disposition(got)
	require.True(t, ok)
	assert.Equal(t, 1, fr.Settled())
	assert.NotEmpty(t, d.String())

	// Without hooks a Tap is its Receiver.
	plain := &Tap{Receiver: fr}
	fr.Push(amqp.NewMessage([]byte("y")))
	got, err = plain.Receive(context.Background(), nil)
	require.NoError(t, err)
	require.NoError(t, plain.AcceptMessage(context.Background(), got))
	assert.Equal(t, 2, fr.Settled())
}
