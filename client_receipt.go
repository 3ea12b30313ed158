// The receipts of a ClientPublisher: PublishWithReceipt pipelined over the
// Client's current link, with the loss rules of Client.Publisher.

package artemis

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/go-amqp"
)

// start writes msg on the current link (re-attaching first when it is known
// to be gone) and queues r on that link's resolver (sendPath): a
// ClientPublisher's PublishWithReceipt pipelines over the go-amqp link. The
// rules of Client.Publisher hold for each receipt:
//
//   - no link could be had, or the transfer was refused before it was
//     written: an error here, nothing sent;
//   - the link or the connection failed after the transfer may have been
//     written (while writing, or while the outcome was awaited): without a
//     duplicate id the receipt resolves to an error matching
//     ErrOutcomeUnknown; with one (WithDuplicateDetection) the message is
//     sent once more on a re-dialed link, and the receipt resolves as
//     accepted when that copy is accepted, else (never written, refused,
//     or lost too) to ErrOutcomeUnknown: the first copy may be stored.
//     The retry is bounded by retryTimeout, as the receipt has no context
//     of its own by then, and, like Publish's, re-dials at most once and
//     never waits out an outage;
//   - no outcome within retryTimeout of the write (a broker that stopped
//     settling, a half-open network that still carries heartbeats): it
//     counts as an outcome timeout of the connection
//     (ClientOptions.OutcomeTimeouts) and is handled as a lost outcome
//     (above), the link given up.
func (s *clientSender) start(ctx context.Context, msg *amqp.Message, r *Receipt) (bool, error) {
	// Without a connection, wait for the Client's re-dial within ctx, as
	// Publish does (ClientOptions.FailFast: do not).
	return s.startWait(ctx, msg, r, !s.c.failFast)
}

// startWait is start, waiting for a connection only when wait is set.
func (s *clientSender) startWait(ctx context.Context, msg *amqp.Message, r *Receipt, wait bool) (kept bool, err error) {
	sl, pt, err := s.writeOn(ctx, msg, wait)
	if sl == nil {
		return false, err // nothing was sent
	}
	// The message is needed after the write only for a resend, which only
	// a message with a duplicate id gets: a pooled one (without) is
	// recycled once written (Publisher.startReceipt).
	var keep *amqp.Message
	if hasDuplicateID(msg) {
		keep = msg
	}
	if err != nil {
		s.cutOff(sl, err) // cut between its frames: never stored, but the link goes
		if !mayBeStored(err) || !linkLost(err) {
			// Refused, or cut by ctx, before its last frame was written,
			// or (defensively: a frame's write is not cut by ctx, see
			// handoffContext) the caller's context ended: never stored.
			if mayBeStored(err) {
				return false, s.unknown(err)
			}
			return false, s.c.red.error(err)
		}
		// Cut off while being written: it may be stored. The receipt
		// resolves the way a lost outcome does, but the link is given up
		// now, not when the resolver reaches the receipt: the publishes
		// until then re-attach rather than write on a dead link.
		s.failed(sl, err)
		sl.queue(clientTransfer{r: r, retry: keep, lost: err})
		return true, nil
	}
	// Bounded from the write: receipts written together expire together,
	// however long the resolver took to reach this one.
	sl.queue(clientTransfer{r: r, pt: pt, retry: keep, deadline: time.Now().Add(s.retryTimeout())})
	return keep != nil, nil
}

// writeOn writes msg on the current link (senderLink.write), on a new one
// when it finds that link cut. A nil link: no link, nothing written.
func (s *clientSender) writeOn(ctx context.Context, msg *amqp.Message, wait bool) (*senderLink, pendingTransfer, error) {
	var pt pendingTransfer
	sl, err := s.onUncutLink(ctx, wait, func(sl *senderLink) (err error) {
		pt, err = sl.write(ctx, msg)
		return err
	})
	if sl == nil {
		return nil, pendingTransfer{}, err
	}
	return sl, pt, err
}

// queue hands ct to sl's resolver, starting it when none runs.
func (sl *senderLink) queue(ct clientTransfer) {
	if sl.outcomes.push(ct) {
		go sl.resolve()
	}
}

// resolve resolves sl's receipts in the order written, while any is
// pending (the twin of resolver.run, with the Client's loss rules).
func (sl *senderLink) resolve() {
	var batch []clientTransfer
	next := 0         // batch[next:] are still pending
	awaiting := false // batch[next]'s outcome is being awaited (and its loss handled)
	clean := false
	defer func() {
		if !clean {
			rest := batch[next:]
			if awaiting {
				// A callback of the loss handling (OnEvent, the Logger's
				// handler) ended the goroutine (runtime.Goexit) while
				// this receipt's loss was handled: a loss, perhaps
				// already resent. Handling it again would meet the
				// same callback, without end; it resolves as unknown.
				rest[0] = clientTransfer{r: rest[0].r, pt: rest[0].pt, cut: true}
			}
			sl.outcomes.requeue(rest)
			go sl.resolve()
		}
	}()
	for {
		var ok bool
		if batch, ok = sl.outcomes.take(); !ok {
			clean = true
			return
		}
		next = 0
		for i := range batch {
			ct := batch[i]
			awaiting = true
			state, err := sl.awaitOutcome(&ct)
			sl.settled(&ct.pt)
			awaiting = false
			batch[i] = clientTransfer{}
			next = i + 1
			ct.r.resolve(state, err)
		}
		sl.outcomes.done(batch)
	}
}

// awaitOutcome waits, on sl's resolver, for the outcome of a transfer
// startWait wrote on sl, until its deadline (the resolver's reusable timer;
// a last look of receiptGrace sees an outcome that already came), and
// applies the loss rules of start.
func (sl *senderLink) awaitOutcome(ct *clientTransfer) (amqp.DeliveryState, error) {
	s := sl.sender
	if ct.cut {
		return nil, s.unknown(errLossHandlingCut)
	}
	if ct.lost != nil {
		return s.receiptLoss(sl, ct.retry, ct.lost)
	}
	exp := &sl.outcomes.exp
	state, err := ct.pt.wait(exp.start(max(time.Until(ct.deadline), receiptGrace)))
	expired := exp.stop()
	if err == nil || !mayBeStored(err) {
		if err == nil || !linkLost(err) {
			sl.cn.answered() // the broker answered (see clientSender.transfer)
		}
		return state, s.c.red.error(err)
	}
	if expired && isContextError(err) {
		// No outcome in time, on a link that may still carry heartbeats:
		// an outcome timeout of the connection, as a Publish's is, and the
		// outcome is unknown. Not the deadline's error: the receipt is
		// resolved, not still pending.
		err = fmt.Errorf("no outcome within %v of the write", s.retryTimeout())
		s.c.outcomeTimedOut(sl.cn, err)
	}
	return s.receiptLoss(sl, ct.retry, err)
}

// receiptGrace is the least a receipt's outcome is waited for, even past
// its bound: long enough to see an outcome that already came.
const receiptGrace = 10 * time.Millisecond

// receiptLoss is afterLoss for a receipt, under a context of its own; msg
// is nil when the message carried no duplicate id (it is not resent).
func (s *clientSender) receiptLoss(sl *senderLink, msg *amqp.Message, err error) (amqp.DeliveryState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.retryTimeout())
	defer cancel()
	return s.afterLoss(ctx, sl, msg, err)
}
