// Package fakelink provides in-memory AMQP links for unit tests: a Receiver
// that records the disposition of every delivery and fails the test on a
// second or a missing settlement, and a Sender whose broker outcome is
// programmable.
package fakelink

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// Address returns the link's address.
func (r *Receiver) Address() string { return r.addr }

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
type Sender struct {
	mu   sync.Mutex
	sent []*amqp.Message
	kept []*amqp.Message

	// Outcome decides each transfer's result; nil accepts everything.
	Outcome func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error)
}

// Accept accepts every transfer.
func Accept(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
	return &amqp.StateAccepted{}, nil
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
	s.mu.Lock()
	s.sent = append(s.sent, m)
	out := s.Outcome
	s.mu.Unlock()
	if out == nil {
		out = Accept
	}
	state, err := out(ctx, m)
	if err == nil {
		if _, ok := state.(*amqp.StateAccepted); ok {
			s.mu.Lock()
			s.kept = append(s.kept, m)
			s.mu.Unlock()
		}
	}
	return state, err
}

// Send behaves as go-amqp's Sender.Send: an error for a rejected outcome,
// nil for released and modified ones.
func (s *Sender) Send(ctx context.Context, m *amqp.Message, _ *amqp.SendOptions) error {
	state, err := s.SendOutcome(ctx, m)
	if err != nil {
		return err
	}
	if rej, ok := state.(*amqp.StateRejected); ok {
		if rej.Error != nil {
			return rej.Error
		}
		return errors.New("rejected")
	}
	return nil
}

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
