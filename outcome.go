// The confirmed send: a transfer counts only when the broker's outcome is
// accepted. Publish and every dead-letter write go through it.

package artemis

import (
	"context"

	"github.com/Azure/go-amqp"
)

// OutcomeSender is a Sender that reports the broker's outcome of each
// transfer. The consumer confirms dead-letter writes through it when the
// dead-letter sender implements it; *amqp.Sender is confirmed through
// SendWithReceipt instead. A Sender that is neither is trusted when Send
// returns nil.
type OutcomeSender interface {
	Sender
	SendOutcome(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error)
}

type receiptSender interface {
	SendWithReceipt(ctx context.Context, msg *amqp.Message, opts *amqp.SendWithReceiptOptions) (amqp.SendReceipt, error)
}

// sendConfirmed sends msg and succeeds only when the broker's outcome is
// accepted. go-amqp's Send returns nil for released and modified outcomes,
// so those are read from the receipt and turned into an *OutcomeError.
func sendConfirmed(ctx context.Context, s Sender, msg *amqp.Message) error {
	state, err := transfer(ctx, s, msg)
	if err != nil {
		return err
	}
	return outcomeError(state)
}

// transfer sends msg and waits for the broker's outcome: from an
// OutcomeSender, or from the receipt of an *amqp.Sender. A Sender that is
// neither is trusted when Send returns nil (reported as accepted).
func transfer(ctx context.Context, s Sender, msg *amqp.Message) (amqp.DeliveryState, error) {
	switch s := s.(type) {
	case OutcomeSender:
		return s.SendOutcome(ctx, msg)
	case receiptSender:
		receipt, err := s.SendWithReceipt(ctx, msg, nil)
		if err != nil {
			return nil, err
		}
		return receipt.Wait(ctx)
	}
	if err := s.Send(ctx, msg, nil); err != nil {
		return nil, err
	}
	return &amqp.StateAccepted{}, nil
}

// outcomeError maps a broker outcome to nil (accepted) or an *OutcomeError.
func outcomeError(state amqp.DeliveryState) error {
	if _, ok := state.(*amqp.StateAccepted); ok {
		return nil
	}
	return &OutcomeError{State: state}
}
