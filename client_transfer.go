// A send on a Client sender's link: the sync confirmed send (SendOutcome)
// and the resend after a lost outcome; every write on a link, in turn, and
// a link left with a transfer cut between its frames, detached once the
// outcomes written before it came.

package artemis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/go-amqp"
)

// SendOutcome sends msg on the current link and returns the broker's
// outcome, re-attaching first when the link is known to be gone. After an
// ambiguous failure it retries once only when msg carries a duplicate id
// (see Client.Publisher).
//
// Without a connection it waits for the Client's re-dial within ctx
// (ClientOptions.FailFast: it does not). The retry after an unknown outcome
// never waits: it re-dials at most once, as a fail-fast publish does.
func (s *clientSender) SendOutcome(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	return s.sendOutcome(ctx, msg, !s.c.failFast)
}

// sendOutcome is SendOutcome, waiting for a connection only when wait is
// set.
func (s *clientSender) sendOutcome(ctx context.Context, msg *amqp.Message, wait bool) (amqp.DeliveryState, error) {
	var state amqp.DeliveryState
	sl, err := s.onUncutLink(ctx, wait, func(sl *senderLink) (err error) {
		state, err = s.transfer(ctx, sl, msg)
		return err
	})
	if sl == nil {
		return nil, err // nothing was sent
	}
	if err == nil || !mayBeStored(err) {
		return state, s.c.red.error(err)
	}
	return s.afterLoss(ctx, sl, msg, err)
}

// onUncutLink runs write on the current link, and again on a new one when
// it finds that link cut (errLinkCut: nothing was written), up to cutTries
// links. It returns the link of the last write and its error; a nil link
// when none could be had (that error, nothing written).
func (s *clientSender) onUncutLink(ctx context.Context, wait bool, write func(*senderLink) error) (*senderLink, error) {
	for try := 1; ; try++ {
		sl, err := s.link(ctx, wait)
		if err != nil {
			return nil, err
		}
		err = write(sl)
		if errors.Is(err, errLinkCut) && try < cutTries {
			continue // nothing was written: on a new link
		}
		return sl, err
	}
}

// afterLoss handles a transfer on sl that failed after it may have been
// written. When the caller's own context ended while the outcome was
// awaited, that says nothing about the link, which other callers' transfers
// still use: the outcome is unknown and the link stays (a broker that stops
// settling is caught by ClientOptions.OutcomeTimeouts, counted in
// transfer). Otherwise sl is given up, and the message is sent once more on
// a new link when it carries a duplicate id and ctx still runs; else the
// outcome is unknown.
func (s *clientSender) afterLoss(ctx context.Context, sl *senderLink, msg *amqp.Message, err error) (amqp.DeliveryState, error) {
	if isContextError(err) { // never linkLost: the caller's own context ended
		return nil, s.unknown(err)
	}
	s.failed(sl, err)
	if ctx.Err() != nil || msg == nil || !hasDuplicateID(msg) {
		return nil, s.unknown(err)
	}
	retry, lerr := s.link(ctx, false)
	if lerr != nil {
		// lerr's text, not its identity: an ErrConnect here would say that
		// nothing was sent, and a cluster would send it to another member.
		return nil, s.unknown(fmt.Errorf("%w (re-attaching for the retry: %s)", err, lerr.Error()))
	}
	// Told only now that the resend is made, on the link it is made on.
	s.c.emit(ConnectionEvent{Kind: EventPublishRetried, URL: retry.cn.url, Address: s.addr, Err: err})
	state, rerr := s.transfer(ctx, retry, msg)
	if rerr == nil {
		if rerr = outcomeError(state); rerr == nil {
			return state, nil
		}
	}
	if mayBeStored(rerr) {
		s.failed(retry, rerr)
		return nil, s.unknown(rerr)
	}
	// Never written (no credit on the new link until ctx ended) or refused:
	// the first copy may be stored all the same. The resend's error is
	// kept as text: its identity (not sent, not accepted) would say
	// otherwise.
	return nil, s.unknown(fmt.Errorf("%w (the resend: %s)", err, rerr.Error()))
}

// transfer sends msg on sl and keeps its connection's count of outcome
// timeouts (ClientOptions.OutcomeTimeouts): any answer from the broker
// resets it.
func (s *clientSender) transfer(ctx context.Context, sl *senderLink, msg *amqp.Message) (amqp.DeliveryState, error) {
	start := time.Now()
	state, err := sl.transfer(ctx, msg)
	switch {
	case neverSent(err):
		// Still waiting for link credit: nothing was written, and nothing
		// was learnt about the connection. Or cut between its frames: the
		// link is being detached.
		s.cutOff(sl, err)
	case err != nil && isContextError(err) && ctx.Err() != nil:
		// A context too short for any broker to answer in says nothing
		// about the connection.
		if time.Since(start) >= s.c.minOutcomeWait {
			s.c.outcomeTimedOut(sl.cn, err)
		}
	case err == nil || !linkLost(err):
		sl.cn.answered()
	}
	return state, err
}

// transfer is transfer (outcome.go) on sl's link, its write made by write.
func (sl *senderLink) transfer(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	if _, ok := sl.link.(outcomeSender); ok {
		return transfer(ctx, sl.link, msg) // a test's link: it writes and answers in one call
	}
	p, err := sl.write(ctx, msg)
	if err != nil {
		return nil, err
	}
	defer sl.settled(&p)
	return p.wait(ctx)
}

// cutOff gives up sl when err is a transfer cut between its frames
// (errTransferCut): its incomplete delivery would hold up every later
// transfer on it, and the link is being detached. The next caller
// attaches a new one, rather than failing on the detached link.
func (s *clientSender) cutOff(sl *senderLink, err error) {
	if errors.Is(err, errTransferCut) {
		s.failed(sl, err)
	}
}

// send is SendOutcome for a Publisher (sendPath), with a credit wait cut by
// ctx reported as ctx's error too, as a bare link's (creditTimeout).
func (s *clientSender) send(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	state, err := s.SendOutcome(ctx, msg)
	return state, creditTimeout(ctx, err)
}

// Send is SendOutcome for the Sender interface: nil only for an accepted
// outcome, an *OutcomeError for the others. opts are ignored: transfers
// are always sent unsettled.
func (s *clientSender) Send(ctx context.Context, msg *amqp.Message, _ *amqp.SendOptions) error {
	state, err := s.SendOutcome(ctx, msg)
	if err != nil {
		return err
	}
	return outcomeError(state)
}

// errLinkCut: a write found its link left with a transfer cut between its
// frames (senderLink.write); nothing of it was written.
var errLinkCut = errors.New("the link was given up: a transfer before this one was cut between its frames")

// write starts msg's transfer on sl's link. Writes on one link take turns
// here, as they do anyway inside go-amqp (Sender.send holds the link's lock
// for a whole transfer, and its writes), but a caller waits for its turn
// only as long as its ctx lets it: one whose ctx ends first writes nothing
// and gets go-amqp's own never-sent error (transfer-limit-exceeded), with
// ctx's. A transfer cut between its frames (errTransferCut) leaves its
// incomplete delivery on the link: the writes waiting behind it must not
// follow it onto the link. It marks the link cut and broken before the
// next write's turn, which then writes nothing and returns errLinkCut (its
// caller writes on a new link: writeOn), and the link is detached once the
// outcomes of the transfers written before the cut came (closeWhenSettled).
func (sl *senderLink) write(ctx context.Context, msg *amqp.Message) (pendingTransfer, error) {
	select {
	case sl.writeTurn <- struct{}{}:
	case <-ctx.Done():
		return pendingTransfer{}, creditTimeout(ctx, &amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded,
			Description: "the link's earlier transfer was still being written"})
	}
	defer func() { <-sl.writeTurn }()
	if sl.cut.Load() {
		return pendingTransfer{}, errLinkCut
	}
	pt, err := startTransfer(ctx, sl.link, msg)
	switch {
	case errors.Is(err, errTransferCut):
		sl.cut.Store(true)
		sl.broken.Store(true)
		go sl.closeWhenSettled()
	case err == nil && pt.pending():
		sl.inflight.Add(1)
	}
	return pt, err
}

// settled counts out a transfer write counted in: its outcome came, or
// its wait ended.
func (sl *senderLink) settled(pt *pendingTransfer) {
	if pt.pending() {
		sl.inflight.Add(-1)
	}
}

// closeWhenSettled detaches a link cut between a transfer's frames once
// the transfers written on it before (complete deliveries, which the broker
// answers in order) have their outcomes, waiting at most the receipts'
// retryTimeout: detached at once, their outcomes would be lost, and with
// them other callers' publishes, though their contexts still ran.
func (sl *senderLink) closeWhenSettled() {
	s := sl.sender
	deadline := time.Now().Add(s.retryTimeout())
	for sl.inflight.Load() > 0 && time.Now().Before(deadline) && !sl.cn.dead() {
		time.Sleep(5 * time.Millisecond)
	}
	if !sl.cn.dead() {
		_ = s.closeLink(context.Background(), sl)
	}
}

// cutTries bounds the new links a write takes after finding its link cut
// (errLinkCut): each one means another caller's transfer was cut between
// its frames on the link before.
const cutTries = 3
