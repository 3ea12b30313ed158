// Package queuelink attaches plain go-amqp links to an Artemis queue, below
// the library's Client, and reads and writes on them: what the bqartemis
// tool, the integration-test harness (internal/brokertest) and the
// examples' start-up share. Every link asks for the "queue" capability: an
// anycast queue on Artemis, auto-created if need be (section 7 of the
// contract).
package queuelink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/go-amqp"
)

// Sender attaches a sender to queue that sends unsettled, so every
// transfer gets the broker's outcome (see SendAccepted).
func Sender(ctx context.Context, s *amqp.Session, queue string) (*amqp.Sender, error) {
	snd, err := s.NewSender(ctx, queue, &amqp.SenderOptions{
		TargetCapabilities: []string{"queue"},
		SettlementMode:     amqp.SenderSettleModeUnsettled.Ptr(),
	})
	if err != nil {
		return nil, fmt.Errorf("attach a sender to %s: %w", queue, err)
	}
	return snd, nil
}

// Receiver attaches a receiver that consumes from queue. Deliveries come
// unsettled: each stays on the queue until the caller accepts it. credit
// is the link credit go-amqp keeps topped up; -1 leaves credit to the
// caller's IssueCredit calls.
func Receiver(ctx context.Context, s *amqp.Session, queue string, credit int32) (*amqp.Receiver, error) {
	r, err := s.NewReceiver(ctx, queue, &amqp.ReceiverOptions{
		SourceCapabilities:        []string{"queue"},
		RequestedSenderSettleMode: amqp.SenderSettleModeUnsettled.Ptr(),
		Credit:                    credit,
	})
	if err != nil {
		return nil, fmt.Errorf("attach a receiver to %s: %w", queue, err)
	}
	return r, nil
}

// Browser attaches a receiver that browses queue: its source asks for the
// "copy" distribution mode, so Artemis sends copies and leaves every
// message in place (settling a copy changes nothing on the broker). The
// copies come pre-settled, so credit (100) keeps flowing without a
// disposition per message.
func Browser(ctx context.Context, s *amqp.Session, queue string) (*amqp.Receiver, error) {
	r, err := s.NewReceiver(ctx, queue, &amqp.ReceiverOptions{
		SourceCapabilities:        []string{"queue"},
		SourceDistributionMode:    amqp.SourceDistributionModeCopy,
		RequestedSenderSettleMode: amqp.SenderSettleModeSettled.Ptr(),
		Credit:                    100,
	})
	if err != nil {
		return nil, fmt.Errorf("browse %s: %w", queue, err)
	}
	return r, nil
}

// SendAccepted sends msg on s and returns nil only once the broker's
// outcome is accepted: rejected, released or modified, or no outcome, is
// an error. (go-amqp's Send returns nil for released and modified.)
func SendAccepted(ctx context.Context, s *amqp.Sender, msg *amqp.Message) error {
	receipt, err := s.SendWithReceipt(ctx, msg, nil)
	if err != nil {
		return err
	}
	state, err := receipt.Wait(ctx)
	if err != nil {
		return err
	}
	switch st := state.(type) {
	case *amqp.StateAccepted:
		return nil
	case *amqp.StateRejected:
		if st.Error != nil {
			return fmt.Errorf("the broker rejected the message: %s", st.Error.Error())
		}
		return errors.New("the broker rejected the message")
	default:
		return fmt.Errorf("the broker did not accept the message (outcome %T)", state)
	}
}

// ReceiveOrIdle returns the next delivery on r, or nil (and no error) once
// none has come for idle. AMQP gives no end-of-queue mark, and Artemis does
// not answer go-amqp's drain (it asks with zero credit), so a queue counts
// as read to the end once it has been silent for idle.
func ReceiveOrIdle(ctx context.Context, r *amqp.Receiver, idle time.Duration) (*amqp.Message, error) {
	rctx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	msg, err := r.Receive(rctx, nil)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, nil
	}
	return msg, err
}
