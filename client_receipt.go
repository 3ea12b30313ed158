// The receipts of a ClientPublisher: PublishWithReceipt pipelined over the
// Client's current link, with the loss rules of Client.Publisher.

package artemis

import (
	"context"
	"time"

	"github.com/Azure/go-amqp"
)

// startOutcome writes msg on the current link (re-attaching first when it
// is known to be gone) and returns its pending outcome: the pendingSender
// of outcome.go, which makes a ClientPublisher's PublishWithReceipt
// pipeline over the go-amqp link. The rules of Client.Publisher hold for
// each receipt:
//
//   - no link could be had, or the transfer was refused before it was
//     written: an error here, nothing sent;
//   - the link or the connection failed after the transfer may have been
//     written (while writing, or while the outcome was awaited): without a
//     duplicate id the receipt resolves to an error matching
//     ErrOutcomeUnknown; with one (WithDuplicateDetection) the message is
//     sent once more on a re-dialed link, and the receipt resolves with
//     that transfer's outcome (ErrOutcomeUnknown if it fails the same way).
//     The retry is bounded by retryTimeout, as the receipt has no context
//     of its own by then, and, like Publish's, re-dials at most once and
//     never waits out an outage.
func (s *clientSender) startOutcome(ctx context.Context, msg *amqp.Message) (pendingTransfer, error) {
	// Without a connection, wait for the Client's re-dial within ctx, as
	// Publish does (ClientOptions.FailFast: do not).
	sl, err := s.link(ctx, !s.c.failFast)
	if err != nil {
		return pendingTransfer{}, err // nothing was sent
	}
	pt, err := startTransfer(ctx, sl.link, msg)
	if err != nil {
		if !mayBeStored(err) {
			return pendingTransfer{}, s.c.red.error(err)
		}
		// Cut off while being written: it may be stored. The receipt
		// resolves the way a lost outcome does, but the link is given up
		// now, not when the resolver reaches the receipt: the publishes
		// until then re-attach rather than write on a dead link.
		s.failed(sl, err)
		lost := err
		return pendingTransfer{later: func(context.Context) (amqp.DeliveryState, error) {
			return s.receiptLoss(sl, msg, lost)
		}}, nil
	}
	return pendingTransfer{later: func(wctx context.Context) (amqp.DeliveryState, error) {
		state, err := pt.wait(wctx)
		if err == nil || !mayBeStored(err) {
			if err == nil || !linkLost(err) {
				sl.cn.timeouts.Store(0) // the broker answered (see clientSender.transfer)
			}
			return state, s.c.red.error(err)
		}
		if wctx.Err() != nil {
			return nil, err // the waiter gave up; the transfer is still pending
		}
		return s.receiptLoss(sl, msg, err)
	}}, nil
}

// receiptLoss is afterLoss for a receipt, under a context of its own.
func (s *clientSender) receiptLoss(sl *senderLink, msg *amqp.Message, err error) (amqp.DeliveryState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.retryTimeout())
	defer cancel()
	return s.afterLoss(ctx, sl, msg, err)
}

// retryTimeout bounds a receipt's retry: the re-dial or re-attach, and the
// resent transfer's outcome.
func (s *clientSender) retryTimeout() time.Duration {
	return 2 * s.c.dialTimeout
}
