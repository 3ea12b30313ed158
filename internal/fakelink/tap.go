package fakelink

import (
	"context"

	"github.com/Azure/go-amqp"
)

// Tap is a Receiver with hooks, for a test that must act at an exact point
// of a delivery's way: OnReceive sees every delivery Receive hands out,
// before the consumer does; OnAccept sees every accept, before the
// Receiver records it. A nil hook is not called. Every other method, and
// every check, is the Receiver's.
type Tap struct {
	*Receiver
	OnReceive func(*amqp.Message)
	OnAccept  func(*amqp.Message)
}

// Receive is the Receiver's, then OnReceive with the delivery.
func (t *Tap) Receive(ctx context.Context, o *amqp.ReceiveOptions) (*amqp.Message, error) {
	m, err := t.Receiver.Receive(ctx, o)
	if err == nil && t.OnReceive != nil {
		t.OnReceive(m)
	}
	return m, err
}

// AcceptMessage calls OnAccept with the delivery, then the Receiver's.
func (t *Tap) AcceptMessage(ctx context.Context, m *amqp.Message) error {
	if t.OnAccept != nil {
		t.OnAccept(m)
	}
	return t.Receiver.AcceptMessage(ctx, m)
}
