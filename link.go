// The link interfaces: what the library needs from an AMQP link, at the
// ground of the package. *amqp.Sender and *amqp.Receiver satisfy them; every
// other file sends and receives through them.

package artemis

import (
	"context"

	"github.com/Azure/go-amqp"
)

// Sender is the sending side of an AMQP link. *amqp.Sender satisfies it.
// A Sender that also has a method SendOutcome(ctx, msg)
// (amqp.DeliveryState, error) has each transfer confirmed through it: a
// publish, or a dead-letter write, then fails on an outcome other than
// accepted.
type Sender interface {
	Send(ctx context.Context, msg *amqp.Message, opts *amqp.SendOptions) error
}

// outcomeSender is a Sender that reports the broker's outcome of each
// transfer (a Sender of its own with a SendOutcome method of this
// signature is one). The consumer confirms dead-letter writes through it when the
// dead-letter sender implements it; *amqp.Sender is confirmed through
// SendWithReceipt instead. A Sender that is neither is trusted when Send
// returns nil.
type outcomeSender interface {
	Sender
	SendOutcome(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error)
}

type receiptSender interface {
	SendWithReceipt(ctx context.Context, msg *amqp.Message, opts *amqp.SendWithReceiptOptions) (amqp.SendReceipt, error)
}

// detachable is a receiptSender the library can detach (*amqp.Sender is):
// one left with an incomplete delivery (outcome.go, cutBetweenFrames).
type detachable interface {
	receiptSender
	Close(ctx context.Context) error
}

// Receiver is the receiving side of an AMQP link. *amqp.Receiver satisfies
// it. Attach it with the "queue" capability and without auto-settlement:
// the consumer owns every disposition.
type Receiver interface {
	Receive(ctx context.Context, opts *amqp.ReceiveOptions) (*amqp.Message, error)
	AcceptMessage(ctx context.Context, msg *amqp.Message) error
	ReleaseMessage(ctx context.Context, msg *amqp.Message) error
	ModifyMessage(ctx context.Context, msg *amqp.Message, opts *amqp.ModifyMessageOptions) error
}
