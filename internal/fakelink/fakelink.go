// Package fakelink provides the test doubles of the library's unit tests:
// a Receiver that records the disposition of every delivery and fails the
// test on a second or a missing settlement (or, built by NewCountingReceiver,
// only counts them, for benchmarks), Tap, a Receiver with hooks on receive
// and accept, CreditReceiver, which hands out deliveries on a fixed credit
// for the benchmarks, a Sender whose broker outcome is programmable, and
// LogBuffer, a log sink safe for concurrent writers.
//
// The fake connection (the Client's dial, connection and session seams)
// stays in the library's own tests: those seams are unexported types of the
// package; its links are this package's.
package fakelink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/go-amqp"
)

// Disposition is what a consumer sent for one delivery.
type Disposition struct {
	Outcome           string // "accepted", "released" or "modified"
	DeliveryFailed    bool
	UndeliverableHere bool
}

// The recorded outcomes.
var (
	Accepted = Disposition{Outcome: "accepted"}
	Released = Disposition{Outcome: "released"}
	Failed   = Disposition{Outcome: "modified", DeliveryFailed: true}
)

func (d Disposition) String() string {
	if d.Outcome == "modified" {
		return fmt.Sprintf("modified(delivery-failed=%t, undeliverable-here=%t)", d.DeliveryFailed, d.UndeliverableHere)
	}
	return d.Outcome
}

// ErrLinkClosed is what a closed fake link returns.
var ErrLinkClosed = &amqp.LinkError{}

// Receiver is an in-memory receiver. Every message it hands out through
// Receive, or that a test registers with Track, must be settled exactly once
// before the test ends.
type Receiver struct {
	t    testing.TB
	addr string

	queue   chan *amqp.Message
	again   chan *amqp.Message // redeliveries, sent ahead of queue
	failed  chan struct{}
	failErr error
	once    sync.Once

	mu      sync.Mutex
	tracked []*amqp.Message
	settled map[*amqp.Message]Disposition
	notify  chan *amqp.Message

	// SettleErr, when set, is returned by every settlement call (after
	// recording it), as a dead link would. Set it before the consumer runs,
	// or call SetSettleErr while it does.
	SettleErr error

	// Redeliver, set before the consumer runs, makes the fake broker send a
	// delivery again once it was modified or released, as Artemis does: a
	// copy (a new delivery, settled on its own) ahead of every queued
	// message, its delivery-count incremented when the disposition said
	// delivery-failed.
	Redeliver bool

	// Options are the options the receiver was attached with, if a test
	// attaches it through a seam that has them.
	Options *amqp.ReceiverOptions
	closed  atomic.Bool

	stopped     chan struct{}
	stoppedOnce sync.Once

	// counting receivers (NewCountingReceiver) record nothing and check
	// nothing: they only count.
	counting                               bool
	accepted, released, modified, failures atomic.Int64

	grants []uint32 // IssueCredit's calls, guarded by mu
}

// IssueCredit records a grant of link credit (a link attached with manual
// credit). The fake broker does not hold deliveries back for want of
// credit: a test reads the grants with Grants.
func (r *Receiver) IssueCredit(n uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants = append(r.grants, n)
	return nil
}

// Grants are the credits IssueCredit was given, in order.
func (r *Receiver) Grants() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.grants)
}

// NewReceiver returns a receiver on addr holding msgs. It checks at the end
// of the test that every tracked message was settled.
func NewReceiver(t testing.TB, addr string, msgs ...*amqp.Message) *Receiver {
	r := &Receiver{
		t:       t,
		addr:    addr,
		queue:   make(chan *amqp.Message, 1<<16),
		again:   make(chan *amqp.Message, 1<<16),
		failed:  make(chan struct{}),
		settled: make(map[*amqp.Message]Disposition),
		notify:  make(chan *amqp.Message, 1<<16),
		stopped: make(chan struct{}),
	}
	for _, m := range msgs {
		r.Push(m)
	}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range r.tracked {
			if _, ok := r.settled[m]; !ok {
				t.Errorf("fakelink: a delivery was never settled: %v", describe(m))
			}
		}
	})
	return r
}

// NewCountingReceiver returns a receiver for benchmarks: it only counts
// dispositions (no maps, no locks, no allocation), so a benchmark measures the
// consumer and not the fake. It settles the same message any number of times
// and checks nothing; Receive fails with ErrNotReceiving.
func NewCountingReceiver() *Receiver {
	return &Receiver{counting: true}
}

// ErrNotReceiving is what a counting receiver's Receive returns.
var ErrNotReceiving = errors.New("fakelink: a counting receiver does not receive")

// Counts are the dispositions a counting receiver saw.
type Counts struct {
	Accepted, Released, Modified int
	Failed                       int // the modified ones with delivery-failed
}

// Total is the number of dispositions.
func (c Counts) Total() int { return c.Accepted + c.Released + c.Modified }

// Counted returns what a counting receiver saw.
func (r *Receiver) Counted() Counts {
	return Counts{
		Accepted: int(r.accepted.Load()),
		Released: int(r.released.Load()),
		Modified: int(r.modified.Load()),
		Failed:   int(r.failures.Load()),
	}
}

// Address returns the link's address.
func (r *Receiver) Address() string { return r.addr }

// Close detaches the receiver: Receive fails with an *amqp.LinkError from
// now on.
func (r *Receiver) Close(context.Context) error {
	r.closed.Store(true)
	r.Fail(&amqp.LinkError{})
	return nil
}

// Closed reports whether Close was called.
func (r *Receiver) Closed() bool { return r.closed.Load() }

// Push queues a message for Receive.
func (r *Receiver) Push(m *amqp.Message) { r.queue <- m }

// Track registers a message handed to the consumer directly (Handle), so its
// settlement is checked.
func (r *Receiver) Track(m *amqp.Message) *amqp.Message {
	r.mu.Lock()
	r.tracked = append(r.tracked, m)
	r.mu.Unlock()
	return m
}

// Fail makes Receive return err from now on, as a detached link does.
func (r *Receiver) Fail(err error) {
	r.once.Do(func() {
		r.failErr = err
		close(r.failed)
	})
}

// Receive returns the next queued message, blocking until one is queued,
// the link fails or ctx ends.
func (r *Receiver) Receive(ctx context.Context, _ *amqp.ReceiveOptions) (*amqp.Message, error) {
	if r.counting {
		return nil, ErrNotReceiving
	}
	m, err := r.receive(ctx)
	if err != nil {
		r.stoppedOnce.Do(func() { close(r.stopped) })
	}
	return m, err
}

func (r *Receiver) receive(ctx context.Context) (*amqp.Message, error) {
	select {
	case <-r.failed:
		return nil, r.failErr
	default:
	}
	select {
	case m := <-r.again:
		r.Track(m)
		return m, nil
	default:
	}
	select {
	case m := <-r.again:
		r.Track(m)
		return m, nil
	case m := <-r.queue:
		r.Track(m)
		return m, nil
	case <-r.failed:
		return nil, r.failErr
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Stopped is closed once Receive has returned an error (its context ended
// or the link failed): the caller's receive loop has seen the end.
func (r *Receiver) Stopped() <-chan struct{} { return r.stopped }

// AcceptMessage records an accepted outcome.
func (r *Receiver) AcceptMessage(_ context.Context, m *amqp.Message) error {
	return r.settle(m, Accepted)
}

// ReleaseMessage records a released outcome.
func (r *Receiver) ReleaseMessage(_ context.Context, m *amqp.Message) error {
	return r.settle(m, Released)
}

// ModifyMessage records a modified outcome.
func (r *Receiver) ModifyMessage(_ context.Context, m *amqp.Message, o *amqp.ModifyMessageOptions) error {
	d := Disposition{Outcome: "modified"}
	if o != nil {
		d.DeliveryFailed, d.UndeliverableHere = o.DeliveryFailed, o.UndeliverableHere
	}
	return r.settle(m, d)
}

func (r *Receiver) settle(m *amqp.Message, d Disposition) error {
	if r.counting {
		r.count(d)
		return nil
	}
	if m == nil {
		r.t.Errorf("fakelink: settlement of a nil message (%v)", d)
		return errors.New("fakelink: nil message")
	}
	r.mu.Lock()
	prev, dup := r.settled[m]
	if !dup {
		r.settled[m] = d
	}
	err := r.SettleErr
	r.mu.Unlock()
	if dup {
		r.t.Errorf("fakelink: delivery settled twice: first %v, then %v: %v", prev, d, describe(m))
		return errors.New("fakelink: already settled")
	}
	if err == nil && r.Redeliver && d != Accepted {
		r.again <- redelivery(m, d.DeliveryFailed)
	}
	r.notify <- m
	return err
}

// SetSettleErr makes every settlement from now on fail with err (nil: succeed
// again), as when the link or its connection drops under a running consumer.
func (r *Receiver) SetSettleErr(err error) {
	r.mu.Lock()
	r.SettleErr = err
	r.mu.Unlock()
}

// redelivery is the copy of m the broker sends again.
func redelivery(m *amqp.Message, counted bool) *amqp.Message {
	cp := *m
	h := amqp.MessageHeader{}
	if m.Header != nil {
		h = *m.Header
	}
	if counted {
		h.DeliveryCount++
	}
	cp.Header = &h
	return &cp
}

func (r *Receiver) count(d Disposition) {
	switch d.Outcome {
	case "accepted":
		r.accepted.Add(1)
	case "released":
		r.released.Add(1)
	default:
		r.modified.Add(1)
		if d.DeliveryFailed {
			r.failures.Add(1)
		}
	}
}

// Disposition returns how m was settled.
func (r *Receiver) Disposition(m *amqp.Message) (Disposition, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.settled[m]
	return d, ok
}

// Settled returns the number of settled deliveries.
func (r *Receiver) Settled() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.settled)
}

// Dispositions returns every recorded disposition.
func (r *Receiver) Dispositions() map[*amqp.Message]Disposition {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[*amqp.Message]Disposition, len(r.settled))
	for k, v := range r.settled {
		out[k] = v
	}
	return out
}

// WaitSettled blocks until n more deliveries are settled or ctx ends.
func (r *Receiver) WaitSettled(ctx context.Context, n int) error {
	for i := 0; i < n; i++ {
		select {
		case <-r.notify:
		case <-ctx.Done():
			return fmt.Errorf("fakelink: %d of %d settlements seen: %w", i, n, ctx.Err())
		}
	}
	return nil
}

// Queued returns how many messages are waiting for Receive.
func (r *Receiver) Queued() int { return len(r.queue) }

func describe(m *amqp.Message) string {
	if m == nil {
		return "<nil>"
	}
	if s, ok := m.Value.(string); ok && len(s) > 80 {
		return s[:80] + "..."
	}
	return fmt.Sprintf("value=%v data=%q", m.Value, m.Data)
}

// Sender is an in-memory sender whose broker outcome is set by Outcome.
// The zero Sender accepts every transfer and records each message.
type Sender struct {
	mu    sync.Mutex
	sent  []*amqp.Message
	kept  []*amqp.Message
	count atomic.Int64

	closed atomic.Bool

	// Outcome decides each transfer's result; nil accepts everything.
	Outcome func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error)

	// Gate, when set, runs before each transfer; an error it returns is the
	// transfer's error (a dead connection, say) and nothing is recorded.
	Gate func() error

	// Verdict, when set, is how Send turns an outcome into its error;
	// without it Send behaves as go-amqp's Sender.Send.
	Verdict func(amqp.DeliveryState) error

	// Wire makes the sender keep what a link puts on the wire: each message
	// is encoded while the send runs, as go-amqp does, and Sent and Kept hold
	// the decoded copies, never the *amqp.Message itself (so a caller may
	// reuse it). An encoding error is the transfer's error.
	Wire bool

	// OutcomeOnly makes Send panic: for code that must use SendOutcome.
	OutcomeOnly bool

	// Discard records no message, only the count (see Count): a sender for
	// benchmarks that does not allocate.
	Discard bool

	// Address and Options are the target and options the sender was
	// attached with, if a test attaches it through a seam that has them.
	Address string
	Options *amqp.SenderOptions
}

var accepted = &amqp.StateAccepted{}

// Fixed returns an outcome that answers every transfer with state and err.
func Fixed(state amqp.DeliveryState, err error) func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	return func(context.Context, *amqp.Message) (amqp.DeliveryState, error) { return state, err }
}

// Accept accepts every transfer.
func Accept(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	return accepted, nil
}

// Reject rejects every transfer with a resource-limit-exceeded error.
func Reject(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	return &amqp.StateRejected{Error: &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded, Description: "address full"}}, nil
}

// Release releases every transfer.
func Release(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	return &amqp.StateReleased{}, nil
}

// Modify modifies every transfer with delivery-failed.
func Modify(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	return &amqp.StateModified{DeliveryFailed: true}, nil
}

// Hang never answers: the transfer waits until ctx ends.
func Hang(ctx context.Context, _ *amqp.Message) (amqp.DeliveryState, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Closed fails every transfer as a detached link does.
func Closed(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	return nil, ErrLinkClosed
}

// SendOutcome sends m and returns the broker's outcome.
func (s *Sender) SendOutcome(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
	if s.Gate != nil {
		if err := s.Gate(); err != nil {
			return nil, err
		}
	}
	if s.closed.Load() {
		return nil, &amqp.LinkError{}
	}
	s.count.Add(1)
	if s.Discard {
		if s.Outcome == nil {
			return accepted, nil
		}
		return s.Outcome(ctx, m)
	}
	rec := m
	if s.Wire {
		var err error
		if rec, err = onWire(m); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.sent = append(s.sent, rec)
	out := s.Outcome
	s.mu.Unlock()
	if out == nil {
		out = Accept
	}
	state, err := out(ctx, m)
	if err == nil {
		if _, ok := state.(*amqp.StateAccepted); ok {
			s.mu.Lock()
			s.kept = append(s.kept, rec)
			s.mu.Unlock()
		}
	}
	return state, err
}

// onWire is m as a receiver decodes it.
func onWire(m *amqp.Message) (*amqp.Message, error) {
	b, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	var got amqp.Message
	if err := got.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return &got, nil
}

// Send behaves as go-amqp's Sender.Send: an error for a rejected outcome,
// nil for released and modified ones (unless Verdict says otherwise).
func (s *Sender) Send(ctx context.Context, m *amqp.Message, _ *amqp.SendOptions) error {
	if s.OutcomeOnly {
		panic("fakelink: Send called on an OutcomeOnly sender: SendOutcome must be used")
	}
	state, err := s.SendOutcome(ctx, m)
	if err != nil {
		return err
	}
	if s.Verdict != nil {
		return s.Verdict(state)
	}
	if rej, ok := state.(*amqp.StateRejected); ok {
		if rej.Error != nil {
			return rej.Error
		}
		return errors.New("rejected")
	}
	return nil
}

// Close detaches the sender: every later transfer fails with an
// *amqp.LinkError.
func (s *Sender) Close(context.Context) error {
	s.closed.Store(true)
	return nil
}

// Closed reports whether Close was called.
func (s *Sender) Closed() bool { return s.closed.Load() }

// Count returns how many transfers were attempted (past Gate and Close).
func (s *Sender) Count() int { return int(s.count.Load()) }

// Sent returns every message a send was attempted for.
func (s *Sender) Sent() []*amqp.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*amqp.Message(nil), s.sent...)
}

// Kept returns the messages the fake broker accepted.
func (s *Sender) Kept() []*amqp.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*amqp.Message(nil), s.kept...)
}

// PlainSender hides SendOutcome, leaving only Send: a Sender the consumer
// cannot read outcomes from.
type PlainSender struct{ S *Sender }

// Send forwards to the wrapped Sender.
func (p PlainSender) Send(ctx context.Context, m *amqp.Message, o *amqp.SendOptions) error {
	return p.S.Send(ctx, m, o)
}

// LogBuffer is a log sink several goroutines may write to at once (a
// slog handler over a Client or Consumer, say).
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
