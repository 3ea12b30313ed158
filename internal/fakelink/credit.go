package fakelink

import (
	"context"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// CreditReceiver is a receiver for benchmarks that hands out deliveries
// from a ring of prepared messages as go-amqp does on a link with a fixed
// credit: at most credit of them unsettled at once (each settlement frees
// one unit), until limit were handed out. It records nothing but the count
// of settlements, so it adds no allocation to what it measures; Done is
// closed once limit deliveries were settled. After limit, Receive blocks
// until its context ends.
type CreditReceiver struct {
	ring    []*amqp.Message
	credit  chan struct{}
	next    atomic.Int64
	limit   int64
	settled atomic.Int64
	done    chan struct{}
}

// NewCreditReceiver returns a CreditReceiver over ring (handed out in
// order, round and round) with credit units and limit deliveries.
func NewCreditReceiver(ring []*amqp.Message, credit, limit int) *CreditReceiver {
	r := &CreditReceiver{ring: ring, credit: make(chan struct{}, credit), limit: int64(limit), done: make(chan struct{})}
	for range credit {
		r.credit <- struct{}{}
	}
	return r
}

// Receive waits for a unit of credit and hands out the next delivery.
func (r *CreditReceiver) Receive(ctx context.Context, _ *amqp.ReceiveOptions) (*amqp.Message, error) {
	select {
	case <-r.credit:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	i := r.next.Add(1) - 1
	if i >= r.limit {
		r.credit <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return r.ring[i%int64(len(r.ring))], nil
}

func (r *CreditReceiver) settle() error {
	r.credit <- struct{}{}
	if r.settled.Add(1) == r.limit {
		close(r.done)
	}
	return nil
}

// AcceptMessage settles the delivery: its unit of credit is free again.
func (r *CreditReceiver) AcceptMessage(context.Context, *amqp.Message) error { return r.settle() }

// ReleaseMessage settles the delivery, as AcceptMessage.
func (r *CreditReceiver) ReleaseMessage(context.Context, *amqp.Message) error { return r.settle() }

// ModifyMessage settles the delivery, as AcceptMessage.
func (r *CreditReceiver) ModifyMessage(context.Context, *amqp.Message, *amqp.ModifyMessageOptions) error {
	return r.settle()
}

// Settled is how many deliveries were settled so far.
func (r *CreditReceiver) Settled() int { return int(r.settled.Load()) }

// Done is closed once limit deliveries were settled.
func (r *CreditReceiver) Done() <-chan struct{} { return r.done }
