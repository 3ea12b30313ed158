package artemis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// TestListenSurvivesAHandlerThatExitsItsGoroutine: runtime.Goexit in a
// handler (what t.FailNow does) is a failed attempt, settled once, and
// Listen goes on, with one worker or several, grouped or not.
func TestListenSurvivesAHandlerThatExitsItsGoroutine(t *testing.T) {
	for _, tc := range []struct {
		workers int
		group   string
	}{{1, ""}, {3, ""}, {3, "a"}} {
		t.Run(fmt.Sprintf("workers=%d/group=%q", tc.workers, tc.group), func(t *testing.T) {
			fr := fakelink.NewReceiver(t, "orders")
			const n = 6
			var exiting *amqp.Message
			for i := range n {
				m := groupedMessage(t, tc.group, i)
				if i == 2 {
					exiting = m
				}
				fr.Push(m)
			}
			rec := newRecorder()
			var mu sync.Mutex
			var order []string
			c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, m *amqp.Message) error {
				mu.Lock()
				order = append(order, seqOf(m))
				mu.Unlock()
				if m == exiting {
					runtime.Goexit()
				}
				return nil
			}}, WithConcurrency(tc.workers), WithOnError(rec.onError))
			done, cancel := listenInBackground(c, fr)
			waitSettled(t, fr, n)
			cancel()
			require.NoError(t, <-done)
			d, _ := fr.Disposition(exiting)
			assert.Equal(t, fakelink.Failed, d, "a failed attempt: modified with delivery-failed")
			reps := rec.all()
			require.Len(t, reps, 1)
			assert.ErrorIs(t, reps[0].err, ErrHandlerFailed)
			assert.ErrorIs(t, reps[0].err, ErrHandlerExited)
			var de *DeliveryError
			require.ErrorAs(t, reps[0].err, &de)
			assert.Equal(t, Abandoned, de.Disposition)
			for m, d := range fr.Dispositions() {
				if m != exiting {
					assert.Equal(t, fakelink.Accepted, d)
				}
			}
			if tc.group != "" || tc.workers == 1 {
				mu.Lock()
				assert.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, order, "the group goes on in order")
				mu.Unlock()
			}
		})
	}
}

// TestHandlerExitAtTheLimitIsDeadLettered: the exit counts as the last
// attempt like an error does; Handle settles before its goroutine exits.
func TestHandlerExitAtTheLimitIsDeadLettered(t *testing.T) {
	dlq := &fakelink.Sender{}
	rec := newRecorder()
	c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		runtime.Goexit()
		return errors.New("unreachable")
	}}, WithDeadLetterSender(dlq), WithOnError(rec.onError))
	fr := fakelink.NewReceiver(t, "orders")
	msg := fr.Track(orderMessage(t, 2))
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = c.Handle(context.Background(), fr, msg)
		t.Error("Handle returned: the handler's Goexit goes on exiting the goroutine")
	}()
	<-exited
	d, ok := fr.Disposition(msg)
	require.True(t, ok)
	assert.Equal(t, fakelink.Accepted, d)
	require.Len(t, dlq.Kept(), 1)
	env := dlqEnvelope(t, dlq.Kept()[0])
	assert.Equal(t, ReasonFailed, env.DeadLetter.Reason)
	require.NotNil(t, env.DeadLetter.Error)
	assert.Contains(t, *env.DeadLetter.Error, "exited its goroutine")
	require.Len(t, rec.all(), 1)
	assert.ErrorIs(t, rec.all()[0].err, ErrHandlerExited)
}
