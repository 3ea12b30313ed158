// The reconnecting sender: the outcomeSender under a ClientPublisher and
// Consume's dead-letter writes, re-attached after a loss, and the rules for
// a publish whose outcome is unknown (see Client.Publisher).

package artemis

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
)

// clientSender is an outcomeSender that forwards to the current link to its
// address, re-attaching when the link or the connection was lost. The
// publishers and the consume loop's dead-letter writes go through it.
type clientSender struct {
	c     *brokerClient
	addr  string
	topic bool // attach with the "topic" capability (a multicast address)

	sem      chan struct{}              // held while attaching; a waiting caller's ctx can abandon it
	cur      atomic.Pointer[senderLink] // the current link, nil before the first attach and after a loss
	attached bool                       // guarded by sem: the next attach is a re-attach
	closed   atomic.Bool
}

type senderLink struct {
	sender   *clientSender // whose link it is
	cn       *connection
	link     linkSender
	goAMQP   bool // link is go-amqp's (not a test's fake), known at the attach
	broken   atomic.Bool
	outcomes linkOutcomes // the receipts of the transfers written on it (client_receipt.go)

	writeTurn chan struct{} // held (a token in it) through each write on link: see write
	cut       atomic.Bool   // a transfer on link was cut between its frames
	inflight  atomic.Int32  // transfers written on link whose outcome is still awaited
}

// clientTransfer is a receipt's transfer written on a Client's link, with
// what the loss rules need of it.
type clientTransfer struct {
	r        *Receipt
	pt       pendingTransfer
	retry    *amqp.Message // kept for a resend after a loss: set only when it carries a duplicate id
	deadline time.Time     // when the outcome counts as timed out
	lost     error         // the write itself was cut off: resolved as a loss
	cut      bool          // its loss handling was ended by a callback: resolved as unknown
}

// linkOutcomes are the receipts of the transfers written on one link,
// resolved there and nowhere else: a link that stops settling holds back
// only its own (see outcomeQueue), so a cluster member (or a link given up)
// that stops settling delays no other member's outcomes.
type linkOutcomes struct {
	outcomeQueue[clientTransfer]
	exp expiry // the receipts' deadline; only the running goroutine uses it
}

// usable reports a link neither known broken nor on a connection that is
// dead or that the Client gave up (cn.lost ends on drop, before a close
// that may hang on a half-open network ends cn.conn).
func (sl *senderLink) usable() bool {
	return !sl.broken.Load() && sl.onLiveConn()
}

// onLiveConn reports a link whose connection is neither dead nor given up:
// one that must be detached, usable or not, or it stays on the connection.
func (sl *senderLink) onLiveConn() bool {
	return !sl.cn.dead() && sl.cn.lost.Err() == nil
}

// reuses reports whether a publish may use a pooled message (sendPath):
// the current link is go-amqp's (not a test's fake), which reads a message
// only while the transfer is written, and the message carries no duplicate
// id (one with is kept for a resend after a loss, see afterLoss). Without a
// current link, false.
func (s *clientSender) reuses(dupID bool) bool {
	sl := s.cur.Load()
	return !dupID && sl != nil && sl.goAMQP
}

func (c *brokerClient) newSender(addr string) *clientSender {
	return &clientSender{c: c, addr: addr, sem: make(chan struct{}, 1)}
}

// senderOptions attach with the "queue" capability (the "topic" one for a
// multicast address) and unsettled sends, so every transfer gets the
// broker's outcome.
func senderOptions(topic bool) *amqp.SenderOptions {
	mode := amqp.SenderSettleModeUnsettled
	return &amqp.SenderOptions{TargetCapabilities: []string{capability(topic)}, SettlementMode: &mode}
}

// capability is the terminus capability Artemis reads as the routing type:
// "topic" for multicast, "queue" for anycast.
func capability(topic bool) string {
	if topic {
		return "topic"
	}
	return "queue"
}

// link returns a live link, attaching one when needed. The connection is
// obtained first, with no lock held, waiting for the Client's re-dial when
// wait is set; only the attach itself is serialised, bounded by ctx and the
// dial timeout.
func (s *clientSender) link(ctx context.Context, wait bool) (*senderLink, error) {
	for {
		if s.closed.Load() {
			return nil, ErrClosed
		}
		if sl := s.cur.Load(); sl != nil && sl.usable() {
			return sl, nil
		}
		cn, err := s.c.conn(ctx, wait)
		if err != nil {
			return nil, err
		}
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("attach sender to %s: %w", s.addr, ctx.Err())
		}
		sl, ev, err := s.attachHeld(ctx, cn)
		if ev != nil {
			s.c.emit(*ev)
		}
		if err != nil && wait && ctx.Err() == nil && !s.c.isClosed() && connectionLost(err) {
			continue // the connection died under the attach: wait for the next one
		}
		return sl, err
	}
}

// attachHeld is attach, s.sem released on return, and also when a
// callback run during the attach (OnEvent, the Logger's handler, told of
// a lost connection) ends the goroutine (runtime.Goexit): a slot kept then
// would keep every later attach waiting.
func (s *clientSender) attachHeld(ctx context.Context, cn *connection) (*senderLink, *ConnectionEvent, error) {
	defer func() { <-s.sem }()
	return s.attach(ctx, cn)
}

// attach attaches a link on cn unless another caller already did. s.sem is
// held.
func (s *clientSender) attach(ctx context.Context, cn *connection) (*senderLink, *ConnectionEvent, error) {
	if s.closed.Load() {
		return nil, nil, ErrClosed
	}
	if sl := s.cur.Load(); sl != nil {
		if sl.usable() {
			return sl, nil, nil
		}
		s.retire(sl)
	}
	actx, cancel := context.WithTimeout(ctx, s.c.dialTimeout)
	link, err := cn.sess.NewSender(actx, s.addr, senderOptions(s.topic))
	cancel()
	if err != nil {
		s.c.linkFailed(cn, err)
		return nil, nil, fmt.Errorf("attach sender to %s: %w", s.addr, s.c.red.error(err))
	}
	_, goAMQP := link.(*amqp.Sender)
	sl := &senderLink{sender: s, cn: cn, link: link, goAMQP: goAMQP, writeTurn: make(chan struct{}, 1)}
	s.cur.Store(sl)
	if s.closed.Load() && s.cur.CompareAndSwap(sl, nil) {
		// Closed while attaching (close gave up waiting for s.sem): the
		// new link is detached, not kept.
		go func() { _ = s.closeLink(context.Background(), sl) }()
		return nil, nil, ErrClosed
	}
	ev := &ConnectionEvent{Kind: EventSenderAttached, URL: cn.url, Address: s.addr}
	if s.attached {
		ev.Kind = EventSenderReattached
	}
	s.attached = true
	return sl, ev, nil
}

// retire forgets a broken link and closes it in the background: its detach
// may hang on a half-open network, and no caller waits for it.
func (s *clientSender) retire(sl *senderLink) {
	if !s.cur.CompareAndSwap(sl, nil) {
		return
	}
	if sl.cn.dead() || sl.cut.Load() {
		return // the connection took the link with it; or closeWhenSettled detaches it
	}
	go func() { _ = s.closeLink(context.Background(), sl) }()
}

// closeLink detaches sl, bounded by ctx and the dial timeout.
func (s *clientSender) closeLink(ctx context.Context, sl *senderLink) error {
	cctx, cancel := context.WithTimeout(ctx, s.c.dialTimeout)
	defer cancel()
	return sl.link.Close(cctx)
}

// failed marks sl unusable after err; the connection goes too when err
// says it is gone.
func (s *clientSender) failed(sl *senderLink, err error) {
	sl.broken.Store(true)
	s.c.linkFailed(sl.cn, err)
}

// close detaches the link (a broken one too, unless its connection went:
// that takes the link with it), bounded by ctx (the detach goes on in the
// background, bounded by the dial timeout, when ctx ends first, even while
// another caller's attach was under way: the link it makes is detached).
func (s *clientSender) close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		// An attach holds s.sem: it ends within the dial timeout, and
		// whatever link is current then is detached in the background.
		go func() {
			s.sem <- struct{}{}
			sl := s.cur.Swap(nil)
			<-s.sem
			if sl != nil && sl.onLiveConn() {
				_ = s.closeLink(context.Background(), sl)
			}
		}()
		return ctx.Err()
	}
	sl := s.cur.Swap(nil)
	<-s.sem
	if sl == nil || !sl.onLiveConn() {
		return nil // the connection takes the link with it
	}
	return waitFor(ctx, func() error {
		if err := s.closeLink(context.WithoutCancel(ctx), sl); err != nil && !linkLost(err) {
			return s.c.red.error(err)
		}
		return nil
	})
}

func (s *clientSender) unknown(err error) error {
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, s.c.red.error(err))
}

// mayBeStored reports a failure after which the transfer may have reached
// the broker: the link or connection went down, or ctx ended, while it was
// being written or waiting for its outcome. go-amqp reports a ctx that
// ended before the transfer was handed over as an *amqp.Error (transfer
// limit exceeded), which creditTimeout wraps with ctx's error: that one
// was never sent (neverSent).
func mayBeStored(err error) bool {
	return (linkLost(err) || isContextError(err)) && !neverSent(err)
}

func hasDuplicateID(msg *amqp.Message) bool {
	id, ok := msg.ApplicationProperties[PropDuplicateID].(string)
	return ok && id != ""
}

// retryTimeout bounds a receipt's retry: the re-dial or re-attach, and the
// resent transfer's outcome.
func (s *clientSender) retryTimeout() time.Duration {
	return 2 * s.c.dialTimeout
}

var (
	_ outcomeSender = (*clientSender)(nil)
	_ sendPath      = (*clientSender)(nil)
)
