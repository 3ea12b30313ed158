package queuelink_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

const idle = time.Second

func TestLinksOnABroker(t *testing.T) {
	c := brokertest.Require(t).Dial(t)
	queue := brokertest.Queue(t)
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()

	snd, err := queuelink.Sender(ctx, c.Session, queue)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	for _, body := range []string{"one", "two"} {
		if err := queuelink.SendAccepted(ctx, snd, &amqp.Message{Value: body}); err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
	}

	// A browser gets copies of both, in order, and leaves them in place.
	for round := 0; round < 2; round++ {
		if got := read(ctx, t, c.Session, queue, false); strings.Join(got, ",") != "one,two" {
			t.Fatalf("browse %d: %v, want [one two]", round, got)
		}
	}
	// A receiver takes them off the queue.
	if got := read(ctx, t, c.Session, queue, true); strings.Join(got, ",") != "one,two" {
		t.Fatalf("take: %v, want [one two]", got)
	}
	if got := read(ctx, t, c.Session, queue, false); len(got) != 0 {
		t.Errorf("after the take the queue holds %v, want nothing", got)
	}
}

// read browses queue, or takes (accepts) every message on it, until it is
// silent for idle, and returns the bodies.
func read(ctx context.Context, t *testing.T, s *amqp.Session, queue string, take bool) []string {
	t.Helper()
	var r *amqp.Receiver
	var err error
	if take {
		r, err = queuelink.Receiver(ctx, s, queue, 10)
	} else {
		r, err = queuelink.Browser(ctx, s, queue)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var bodies []string
	for {
		msg, err := queuelink.ReceiveOrIdle(ctx, r, idle)
		if err != nil {
			t.Fatal(err)
		}
		if msg == nil {
			return bodies
		}
		if take {
			if err := r.AcceptMessage(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
		bodies = append(bodies, msg.Value.(string))
	}
}

func TestReceiveOrIdleKeepsTheCallersError(t *testing.T) {
	c := brokertest.Require(t).Dial(t)
	r, err := queuelink.Receiver(context.Background(), c.Session, brokertest.Queue(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseReceiver(r)
	// An idle queue is (nil, nil) only while the caller's context lives: a
	// caller whose own deadline passes first gets its error back, not an
	// empty queue.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if msg, err := queuelink.ReceiveOrIdle(ctx, r, time.Minute); msg != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ReceiveOrIdle past the caller's deadline: %v, %v; want context.DeadlineExceeded", msg, err)
	}
}
