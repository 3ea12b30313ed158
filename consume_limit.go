package artemis

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
)

// consumeLimit bounds a Consume for a job-style worker
// (WithMaxMessages, WithStopWhenIdle): it stops the receiving once
// max deliveries were taken or once none has come for idle, and then ends
// the Consume's context, so that Consume returns as on its context's end:
// the handlers in flight finish and settle, and the deliveries the broker
// pushed ahead on credit go back with the link. One limit is shared by the
// listens of one Consume (each attachment, each cluster member).
type consumeLimit struct {
	max   int64 // deliveries to take in all; 0: no limit
	idle  time.Duration
	taken atomic.Int64 // deliveries taken, and receives reserving one
	end   context.CancelFunc

	mu      sync.Mutex
	active  int // listens receiving
	waiting int // listens stopped idle, waiting for the others
}

func newConsumeLimit(maxMessages int, idle time.Duration, end context.CancelFunc) *consumeLimit {
	return &consumeLimit{max: int64(maxMessages), idle: idle, end: end}
}

// limitListen is one listen under a limit.
type limitListen struct {
	b    *consumeLimit
	idle bool // it stopped because nothing came for idle
	done bool // it stopped at the limit (spent or idle)
}

// join counts a listen that starts receiving.
func (b *consumeLimit) join() *limitListen {
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
	return &limitListen{b: b}
}

// receive is one receive under the limit (a plain one without: w nil). It
// returns no delivery and no error once the limit is reached: max
// deliveries taken (none is received), or none came for idle. A delivery
// it returns counts as taken.
func (w *limitListen) receive(rctx context.Context, r Receiver) (*amqp.Message, error) {
	if w == nil {
		return r.Receive(rctx, nil)
	}
	b := w.b
	if b.max > 0 && b.taken.Add(1) > b.max {
		b.taken.Add(-1)
		w.done = true
		return nil, nil
	}
	ctx, cancel := rctx, context.CancelFunc(func() {})
	if b.idle > 0 {
		ctx, cancel = context.WithTimeout(rctx, b.idle)
	}
	msg, err := r.Receive(ctx, nil)
	cancel()
	if err == nil {
		return msg, nil
	}
	if b.max > 0 {
		b.taken.Add(-1) // the reservation: nothing was taken
	}
	if b.idle > 0 && rctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		w.idle, w.done = true, true
		return nil, nil
	}
	return nil, err
}

// leave is the end of a listen. One that stopped at the limit ends the
// Consume (spent: at once; idle: once every listen of the Consume is idle
// too) and waits for that end, so its Consume loop sees a context that
// ended and does not attach again. ctx is the Consume's.
func (w *limitListen) leave(ctx context.Context) {
	b := w.b
	b.mu.Lock()
	b.active--
	end := false
	switch {
	case w.done && !w.idle:
		end = true
	case w.done:
		b.waiting++
		end = b.active == 0
	}
	b.mu.Unlock()
	if !w.done {
		return // ctx's end, or a lost link: the Consume loop decides
	}
	if end {
		b.end()
	}
	<-ctx.Done()
}
