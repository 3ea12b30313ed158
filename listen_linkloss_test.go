package artemis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// TestListenStartsNothingAfterASettlementLosesTheLink: go-amqp keeps
// handing out prefetched deliveries after the link dropped. Once a
// settlement fails with a link error, no further handler starts; Listen
// returns that error after the handlers in flight finished, and the
// deliveries it took but did not start are given back.
func TestListenStartsNothingAfterASettlementLosesTheLink(t *testing.T) {
	for _, tc := range []struct {
		workers int
		group   func(i int) string
	}{
		{1, func(int) string { return "" }},
		{4, func(int) string { return "" }},
		{4, func(i int) string { return fmt.Sprintf("g%d", i%4) }},
	} {
		t.Run(fmt.Sprintf("workers=%d/grouped=%t", tc.workers, tc.group(1) != ""), func(t *testing.T) {
			fr := fakelink.NewReceiver(t, "orders")
			for i := range 20 { // prefetched on a credit of 20
				fr.Push(groupedMessage(t, tc.group(i), i))
			}
			var calls atomic.Int32
			started := make(chan struct{}, 20)
			gate := make(chan struct{})
			rec := newRecorder()
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
				calls.Add(1)
				started <- struct{}{}
				<-gate
				return nil
			}}, WithConcurrency(tc.workers), WithOnError(rec.onError))
			done, cancel := listenInBackground(c, fr)
			defer cancel()
			for range tc.workers {
				<-started
			}
			cut := &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced, Description: "connection cut"}}
			fr.SetSettleErr(cut)
			close(gate)
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Listen did not return after the link was lost")
			}
			require.Error(t, err)
			var le *amqp.LinkError
			assert.ErrorAs(t, err, &le)
			assert.Contains(t, err.Error(), "link lost")
			assert.Equal(t, int32(tc.workers), calls.Load(), "handler calls: only those in flight at the cut")
			for _, rep := range rec.all() {
				assert.ErrorIs(t, rep.err, ErrSettlement)
			}
			// Every delivery taken was settled (fakelink checks at cleanup);
			// the rest stay with the broker.
			assert.Equal(t, 20, fr.Settled()+fr.Queued())
		})
	}
}

// TestListenGivesBackTheGroupQueuesWhenReceiveFails: deliveries waiting in
// a group's queue when Receive fails are released, never handled.
func TestListenGivesBackTheGroupQueuesWhenReceiveFails(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	taken := make(chan struct{}, 3)
	r := &tapReceiver{Receiver: fr, onReceive: func(*amqp.Message) { taken <- struct{}{} }}
	for i := range 3 {
		fr.Push(groupedMessage(t, "a", i))
	}
	gate := make(chan struct{})
	started := make(chan struct{}, 3)
	var calls atomic.Int32
	c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		calls.Add(1)
		started <- struct{}{}
		<-gate
		return nil
	}}, WithConcurrency(2))
	done, cancel := listenInBackground(c, r)
	defer cancel()
	for range 3 {
		<-taken
	}
	<-started
	fr.Fail(&amqp.LinkError{})
	select {
	case err := <-done:
		t.Fatalf("Listen returned (%v) with a handler in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	err := <-done
	var le *amqp.LinkError
	require.ErrorAs(t, err, &le)
	assert.Contains(t, err.Error(), "babelqueue: receive")
	assert.Equal(t, int32(1), calls.Load())
	counts := map[fakelink.Disposition]int{}
	for _, d := range fr.Dispositions() {
		counts[d]++
	}
	assert.Equal(t, map[fakelink.Disposition]int{fakelink.Accepted: 1, fakelink.Released: 2}, counts)
}

// TestListenHonoursTheClientsLinkHook: when the Client says the connection
// is dead, Listen starts nothing more and returns the cause once the
// handlers in flight are done.
func TestListenHonoursTheClientsLinkHook(t *testing.T) {
	fr := fakelink.NewReceiver(t, "orders")
	for i := range 10 {
		fr.Push(groupedMessage(t, "", i))
	}
	started := make(chan struct{}, 10)
	gate := make(chan struct{})
	var calls atomic.Int32
	c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		calls.Add(1)
		started <- struct{}{}
		<-gate
		return nil
	}}, WithConcurrency(2))
	link, kill := context.WithCancelCause(context.Background())
	dead := errors.New("connection known dead")
	done := make(chan error, 1)
	go func() { done <- c.listen(context.Background(), fr, link) }()
	<-started
	<-started
	kill(dead)
	select {
	case err := <-done:
		t.Fatalf("Listen returned (%v) with handlers in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	err := <-done
	assert.ErrorIs(t, err, dead)
	assert.Equal(t, int32(2), calls.Load())
	accepted := 0
	for _, d := range fr.Dispositions() {
		switch d {
		case fakelink.Accepted:
			accepted++
		case fakelink.Released:
		default:
			t.Errorf("unexpected disposition %v", d)
		}
	}
	assert.Equal(t, 2, accepted, "the handlers in flight settle")
}

// TestListenStartsNoHandlerAfterShutdown: 100 shutdowns with concurrency
// 4; a delivery that Receive returned after the cancel never reaches a
// handler, it is released.
func TestListenStartsNoHandlerAfterShutdown(t *testing.T) {
	var lateTaken, lateStarted, released int
	for round := range 100 {
		fr := fakelink.NewReceiver(t, "orders")
		for i := range 64 {
			fr.Push(groupedMessage(t, []string{"", "a", "b"}[i%3], i))
		}
		var cancelled atomic.Bool
		var mu sync.Mutex
		late := map[*amqp.Message]bool{}
		r := &tapReceiver{Receiver: fr, onReceive: func(m *amqp.Message) {
			if cancelled.Load() {
				mu.Lock()
				late[m] = true
				mu.Unlock()
			}
		}}
		c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, _ *Envelope, m *amqp.Message) error {
			mu.Lock()
			if late[m] {
				lateStarted++
			}
			mu.Unlock()
			return nil
		}}, WithConcurrency(4))
		done, cancel := listenInBackground(c, r)
		waitSettled(t, fr, 8+round%16)
		cancel()
		cancelled.Store(true)
		require.NoError(t, <-done)
		mu.Lock()
		lateTaken += len(late)
		mu.Unlock()
		for m, d := range fr.Dispositions() {
			if d == fakelink.Released {
				released++
			}
			if late[m] {
				assert.Equal(t, fakelink.Released, d)
			}
		}
	}
	t.Logf("100 shutdowns: %d deliveries taken after the cancel, %d handler starts for them, %d released", lateTaken, lateStarted, released)
	assert.Zero(t, lateStarted)
}
