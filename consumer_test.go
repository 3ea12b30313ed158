package artemis

import (
	"context"
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

func TestInvalidConfig(t *testing.T) {
	cases := map[string][]ConsumerOption{
		"max tries 0":     {WithMaxTries(0)},
		"concurrency 0":   {WithConcurrency(0)},
		"timeout 0":       {WithDeadLetterTimeout(0)},
		"negative delay":  {WithDeadLetterRetryDelay(-time.Second)},
		"strategy":        {WithUnknownURN("ignore")},
		"nil handler map": nil,
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			h := Handlers{urnCreated: succeeding}
			if opts == nil {
				h = Handlers{urnCreated: nil}
			}
			c, err := NewConsumer(h, opts...)
			assert.ErrorIs(t, err, ErrInvalidConfig, "reported where the Consumer is built")
			assert.Nil(t, c)

			// A Consumer built anyway (newConsumer, as NewConsumer does before
			// it checks) defers the error to Listen and Handle.
			obs := &observed{}
			c = newConsumer(h, append(opts, WithObserver(obs)))
			r := fakelink.NewReceiver(t, "orders")
			assert.ErrorIs(t, c.Listen(context.Background(), r), ErrInvalidConfig)
			msg := r.Track(orderMessage(t, 0))
			assert.ErrorIs(t, c.Handle(context.Background(), r, msg), ErrInvalidConfig)
			d, _ := r.Disposition(msg)
			assert.Equal(t, fakelink.Released, d, "nothing is lost to a bad configuration")
			if evs := obs.settlements(); assert.Len(t, evs, 1, "the release is observed") {
				assert.Equal(t, DispositionReleased, evs[0].Disposition)
				assert.ErrorIs(t, evs[0].Err, ErrInvalidConfig)
				assert.Equal(t, KindInvalidConfig, evs[0].Kind)
				assert.Equal(t, "invalid_config", evs[0].Kind.String())
			}
		})
	}
}

func TestListenKeepsOrderWithOneWorker(t *testing.T) {
	r := fakelink.NewReceiver(t, "orders")
	const n = 50
	for i := 0; i < n; i++ {
		m := orderMessage(t, 0)
		m.ApplicationProperties["seq"] = fmt.Sprint(i)
		r.Push(m)
	}
	var mu sync.Mutex
	var order []string
	ctx, cancel := context.WithCancel(context.Background())
	c := mustConsumer(t, Handlers{urnCreated: func(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
		mu.Lock()
		order = append(order, HeadersFromContext(ctx).Get("seq"))
		mu.Unlock()
		return nil
	}})
	done := make(chan error, 1)
	go func() { done <- c.Listen(ctx, r) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, r.WaitSettled(wctx, n))
	cancel()
	require.NoError(t, <-done)
	for i, s := range order {
		assert.Equal(t, fmt.Sprint(i), s)
	}
}

func TestListenConcurrentWorkers(t *testing.T) {
	r := fakelink.NewReceiver(t, "orders")
	const workers = 4
	for i := 0; i < workers*3; i++ {
		r.Push(orderMessage(t, 0))
	}
	var mu sync.Mutex
	running, peak := 0, 0
	gate := make(chan struct{})
	started := make(chan struct{}, workers*3)
	c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error {
		mu.Lock()
		running++
		if running > peak {
			peak = running
		}
		mu.Unlock()
		started <- struct{}{}
		<-gate
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}}, WithConcurrency(workers))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Listen(ctx, r) }()
	for i := 0; i < workers; i++ {
		<-started
	}
	close(gate)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, r.WaitSettled(wctx, workers*3))
	cancel()
	require.NoError(t, <-done)
	assert.Equal(t, workers, peak)
	for _, d := range r.Dispositions() {
		assert.Equal(t, fakelink.Accepted, d)
	}
}

func TestListenShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			r := fakelink.NewReceiver(t, "orders")
			for i := 0; i < 10; i++ {
				r.Push(orderMessage(t, 0))
			}
			started := make(chan struct{}, 10)
			release := make(chan struct{})
			var handlerCtxErr error
			var mu sync.Mutex
			var finished atomic.Int32 // handlers that returned
			c := mustConsumer(t, Handlers{urnCreated: func(ctx context.Context, _ *Envelope, _ *amqp.Message) error {
				started <- struct{}{}
				<-release
				mu.Lock()
				handlerCtxErr = ctx.Err()
				mu.Unlock()
				finished.Add(1)
				return nil
			}}, WithConcurrency(workers))
			ctx, cancel := context.WithCancel(context.Background())
			type result struct {
				err      error
				finished int32 // handlers that had returned when Listen did
			}
			done := make(chan result, 1)
			go func() {
				err := c.Listen(ctx, r)
				done <- result{err, finished.Load()}
			}()
			for i := 0; i < workers; i++ {
				<-started
			}
			cancel()
			if workers > 1 {
				// Wait for the receive loop to end: its Receive fails, or it
				// gives back the message it took but could not hand out. (One
				// worker receives only between handlers.) A Listen that did
				// not wait for its workers would return now.
				gaveBack := make(chan struct{})
				go func() {
					wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer wcancel()
					_ = r.WaitSettled(wctx, 1)
					close(gaveBack)
				}()
				select {
				case <-r.Stopped():
				case <-gaveBack:
				}
			}
			select {
			case res := <-done:
				t.Fatalf("Listen returned (%v) before the in-flight handlers finished", res.err)
			default:
			}
			close(release)
			res := <-done
			require.NoError(t, res.err)
			assert.Equal(t, int32(workers), res.finished, "Listen returns only after every in-flight handler returned")
			mu.Lock()
			assert.NoError(t, handlerCtxErr, "in-flight handlers are not cancelled by shutdown")
			mu.Unlock()
			accepted, released := 0, 0
			for _, d := range r.Dispositions() {
				switch d {
				case fakelink.Accepted:
					accepted++
				case fakelink.Released:
					released++
				default:
					t.Errorf("unexpected disposition %v", d)
				}
			}
			assert.Equal(t, workers, accepted, "exactly the in-flight messages were handled")
			// Taken but not started: at most one per worker, the delivery
			// it took just as ctx ended (workers take turns at receiving,
			// and only for themselves).
			limit := workers
			assert.LessOrEqual(t, released, limit, "at most the messages taken but not started are released")
			assert.Equal(t, 10, accepted+released+r.Queued(), "every message is accounted for")
		})
	}
}

func TestListenReturnsLinkFailure(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			r := fakelink.NewReceiver(t, "orders")
			r.Push(orderMessage(t, 0))
			c := mustConsumer(t, Handlers{urnCreated: succeeding}, WithConcurrency(workers))
			wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer wcancel()
			go func() {
				_ = r.WaitSettled(wctx, 1)
				r.Fail(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced, Description: "broker going away"}})
			}()
			err := c.Listen(context.Background(), r)
			require.Error(t, err)
			var le *amqp.LinkError
			assert.ErrorAs(t, err, &le)
			assert.Contains(t, err.Error(), "receive: ")
			assert.Equal(t, 1, r.Settled())
		})
	}
}

// The options only Client.Consume reads are checked with the others, once,
// by NewConsumer.
func TestNewConsumerChecksTheConsumeOptions(t *testing.T) {
	h := Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { return nil }}
	for name, opt := range map[string]ConsumerOption{
		"negative credit":         WithCredit(-1),
		"negative max messages":   WithMaxMessages(-1),
		"negative stop-when-idle": WithStopWhenIdle(-time.Second),
	} {
		c, err := NewConsumer(h, opt)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.Nil(t, c, name)
	}
	c, err := NewConsumer(h, WithCredit(0), WithMaxMessages(0), WithStopWhenIdle(0), WithSelector("a = 'b'"), WithOnlyHandledURNs(), WithoutDeadLetter())
	require.NoError(t, err)
	assert.Equal(t, consumeOptions{selector: "a = 'b'", onlyHandled: true, noDeadLetter: true}, c.run)
}

// WithObserver and WithPayloadValidator are one option each for a Consumer
// and a publisher.
func TestObserverAndValidatorAreConsumerAndPublishOptions(t *testing.T) {
	obs := &observed{}
	var v PayloadValidator = &orderIDValidator{}
	cons := []ConsumerOption{WithObserver(obs), WithPayloadValidator(v)}
	pubs := []PublishOption{WithObserver(obs), WithPayloadValidator(v)}
	c, err := NewConsumer(Handlers{}, cons...)
	require.NoError(t, err)
	assert.Same(t, obs, c.observer)
	assert.Same(t, v, c.payload)
	var cfg publishConfig
	for _, o := range pubs {
		o.applyPublish(&cfg)
	}
	assert.Same(t, obs, cfg.observer)
	assert.Same(t, v, cfg.payload)
}
