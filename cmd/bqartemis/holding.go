package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// window is the credit of a holding reader: how many records the broker
// may send ahead.
const window = 10

// holdingReader consumes a queue record by record for a command that takes
// some records off it (redrive, remove) and keeps the others. A record
// the command keeps is held unsettled, and released (plain release: no
// delivery-failed, its delivery count untouched) only when the reader
// closes, once the queue is read: a record released at once would be
// handed straight back.
type holdingReader struct {
	r     *amqp.Receiver
	queue string
	idle  time.Duration
	held  []*amqp.Message
}

// openHolding attaches a holding reader to queue; next reports the queue
// read once no record came for idle.
func openHolding(ctx context.Context, s *session, queue string, idle time.Duration) (*holdingReader, error) {
	r, err := queuelink.Receiver(ctx, s.sess, queue, -1)
	if err != nil {
		return nil, err
	}
	h := &holdingReader{r: r, queue: queue, idle: idle}
	if err := r.IssueCredit(window); err != nil {
		return nil, errors.Join(err, h.close(ctx))
	}
	return h, nil
}

// next is the next record, or nil once none came for the idle time. With
// refill it grants the broker one more record in its place; without, the
// reader only takes back what the broker already sent ahead.
func (h *holdingReader) next(ctx context.Context, refill bool) (*amqp.Message, error) {
	msg, err := queuelink.ReceiveOrIdle(ctx, h.r, h.idle)
	if err != nil || msg == nil {
		return nil, err
	}
	if refill {
		if err := h.r.IssueCredit(1); err != nil {
			h.hold(msg)
			return nil, err
		}
	}
	return msg, nil
}

// hold keeps msg on the queue: it is released when the reader closes.
func (h *holdingReader) hold(msg *amqp.Message) { h.held = append(h.held, msg) }

// kept is how many records the reader holds.
func (h *holdingReader) kept() int { return len(h.held) }

// take accepts msg: the record leaves the queue.
func (h *holdingReader) take(ctx context.Context, msg *amqp.Message) error {
	return h.r.AcceptMessage(ctx, msg)
}

// close releases the held records and detaches, given 30 s of its own
// even when ctx has ended, so that what the command kept is not left
// unsettled until the connection goes. A record it could not release
// returns to the queue when the link closes.
func (h *holdingReader) close(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var err error
	for _, m := range h.held {
		if rerr := h.r.ReleaseMessage(sctx, m); rerr != nil {
			err = fmt.Errorf("release a record on %s: %w (it returns to the queue when the link closes)", h.queue, rerr)
			break
		}
	}
	_ = h.r.Close(sctx)
	return err
}
