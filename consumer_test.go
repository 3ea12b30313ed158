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

func TestHandlerSeesReconciledAttemptsAndHeaders(t *testing.T) {
	cases := []struct {
		body  int
		dc    uint32
		want  int
		label string
	}{{0, 0, 0, "(0,0)"}, {0, 2, 2, "(0,2)"}, {2, 5, 5, "(2,5)"}, {5, 1, 5, "(5,1)"}, {4, 0, 4, "(4,0)"}, {3, 3, 3, "(3,3)"}}
	for _, tc := range cases {
		t.Run(tc.label, func(t *testing.T) {
			env, err := NewEnvelope(urnCreated, nil, EnvelopeTraceID(testTrace))
			require.NoError(t, err)
			env.Attempts = tc.body
			msg, err := NewMessage(env, WithHeaders(map[string]string{"traceparent": "00-abc-def-01"}))
			require.NoError(t, err)
			msg.Header.DeliveryCount = tc.dc
			var seen int
			var headers HeaderCarrier
			var raw *amqp.Message
			c := mustConsumer(t, Handlers{urnCreated: func(ctx context.Context, e *Envelope, m *amqp.Message) error {
				seen, headers, raw = e.Attempts, HeadersFromContext(ctx), MessageFromContext(ctx)
				return nil
			}}, WithMaxTries(100))
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Equal(t, tc.want, seen)
			assert.Equal(t, "00-abc-def-01", headers.Get("traceparent"))
			assert.Equal(t, HeaderCarrier{"traceparent": "00-abc-def-01"}, headers, "the caller's headers only, not the contract's")
			assert.Equal(t, "babelqueue", raw.ApplicationProperties[PropAppID], "the raw message keeps them")
			assert.Same(t, msg, raw)
		})
	}
}

func TestRouting(t *testing.T) {
	t.Run("the annotation wins over the body URN", func(t *testing.T) {
		msg := orderMessage(t, 0)
		msg.Annotations[AnnotationJMSType] = "urn:babel:orders:shipped"
		var got string
		c := mustConsumer(t, Handlers{
			"urn:babel:orders:shipped": func(_ context.Context, e *Envelope, _ *amqp.Message) error { got = "shipped:" + e.URN(); return nil },
			urnCreated:                 func(context.Context, *Envelope, *amqp.Message) error { got = "created"; return nil },
		})
		handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, "shipped:"+urnCreated, got)
	})
	t.Run("the subject routes when the annotation is absent (a JMS producer's JMSType)", func(t *testing.T) {
		msg := orderMessage(t, 0)
		delete(msg.Annotations, AnnotationJMSType)
		shipped := "urn:babel:orders:shipped"
		msg.Properties.Subject = &shipped
		var got string
		c := mustConsumer(t, Handlers{
			shipped:    func(context.Context, *Envelope, *amqp.Message) error { got = "shipped"; return nil },
			urnCreated: func(context.Context, *Envelope, *amqp.Message) error { got = "created"; return nil },
		})
		handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, "shipped", got)
	})
	for name, ann := range map[string]any{"absent": nil, "blank": "  ", "not a string": int64(7), "binary": []byte(urnCreated)} {
		t.Run("falls back to the body URN when the annotation is "+name, func(t *testing.T) {
			msg := orderMessage(t, 0)
			msg.Properties.Subject = nil
			if ann == nil {
				delete(msg.Annotations, AnnotationJMSType)
			} else {
				msg.Annotations[AnnotationJMSType] = ann
			}
			called := false
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { called = true; return nil }})
			got := handleOne(t, c, newRecorder(), nil, msg)
			assert.True(t, called)
			assert.Equal(t, fakelink.Accepted, got.disp)
		})
	}
	t.Run("the urn alias routes when job is absent", func(t *testing.T) {
		msg := rawMessage(`{"urn":"urn:babel:orders:created","trace_id":"t-1","data":{},"meta":{"id":"m-1","queue":"orders","lang":"node","schema_version":1,"created_at":1},"attempts":0}`)
		var job string
		c := mustConsumer(t, Handlers{urnCreated: func(_ context.Context, e *Envelope, _ *amqp.Message) error { job = e.Job; return nil }})
		got := handleOne(t, c, newRecorder(), nil, msg)
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Equal(t, urnCreated, job)
	})
	t.Run("binary and data-section bodies decode", func(t *testing.T) {
		for _, mk := range []func(string) *amqp.Message{
			func(s string) *amqp.Message { return &amqp.Message{Value: []byte(s)} },
			func(s string) *amqp.Message { return &amqp.Message{Data: [][]byte{[]byte(s)}} },
			func(s string) *amqp.Message { return &amqp.Message{Data: [][]byte{[]byte(s[:10]), []byte(s[10:])}} },
		} {
			body := orderMessage(t, 0).Value.(string)
			called := false
			c := mustConsumer(t, Handlers{urnCreated: func(context.Context, *Envelope, *amqp.Message) error { called = true; return nil }})
			got := handleOne(t, c, newRecorder(), nil, mk(body))
			assert.True(t, called)
			assert.Equal(t, fakelink.Accepted, got.disp)
		}
	})
}

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
				assert.Equal(t, "invalid_config", evs[0].KindName())
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
			// Taken but not started: the one the loop holds and, with
			// several workers, the hand-off buffer (one per worker).
			limit := 1
			if workers > 1 {
				limit += workers
			}
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
			assert.Contains(t, err.Error(), "babelqueue: receive")
			assert.Equal(t, 1, r.Settled())
		})
	}
}

// TestUnknownURNDoesNotDecode proves that a message routed by its
// x-opt-jms-type to the unknown-URN strategy is settled without its body
// being read: a poison body (bad JSON, invalid UTF-8, a sequence section) is
// handled exactly as the strategy says and never reported as poison.
func TestUnknownURNDoesNotDecode(t *testing.T) {
	bodies := map[string]func(m *amqp.Message){
		"bad JSON":       func(m *amqp.Message) { m.Value = benchPoisonBody },
		"invalid UTF-8":  func(m *amqp.Message) { m.Value = nil; m.Data = [][]byte{{0xff, 0xfe, '{'}} },
		"sequence body":  func(m *amqp.Message) { m.Value = nil; m.Sequence = [][]any{{"a"}} },
		"no body at all": func(m *amqp.Message) { m.Value = nil },
	}
	strategies := []struct {
		strategy UnknownURNStrategy
		want     fakelink.Disposition
		reported bool
	}{
		{UnknownURNFail, fakelink.Failed, true},
		{UnknownURNRelease, fakelink.Failed, false},
		{UnknownURNDelete, fakelink.Accepted, false},
	}
	for name, setBody := range bodies {
		for _, s := range strategies {
			t.Run(name+"/"+string(s.strategy), func(t *testing.T) {
				var reports []error
				dlq := &fakelink.Sender{}
				c := mustConsumer(t, Handlers{benchURN: benchAcceptOrder}, WithUnknownURN(s.strategy), WithDeadLetterSender(dlq),
					WithOnError(func(_ context.Context, err error, env *Envelope, _ *amqp.Message) {
						assert.Nil(t, env, "no envelope was decoded")
						reports = append(reports, err)
					}))
				msg := benchDelivery(t, benchUnknown)
				setBody(msg)
				r := fakelink.NewReceiver(t, benchQueue)
				r.Track(msg)
				ret := c.Handle(context.Background(), r, msg)

				disp, ok := r.Disposition(msg)
				require.True(t, ok, "the delivery was not settled")
				assert.Equal(t, s.want, disp)
				assert.Empty(t, dlq.Sent(), "nothing goes to the DLQ")
				if s.reported {
					require.Len(t, reports, 1)
					assert.ErrorIs(t, reports[0], ErrUnknownURN)
					assert.NotErrorIs(t, reports[0], ErrPoison)
					assert.ErrorIs(t, ret, ErrUnknownURN)
				} else {
					assert.Empty(t, reports)
					assert.NoError(t, ret)
				}
			})
		}
	}
}

func TestHostileNonStringJMSType(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value any
	}{
		{"int", int64(42)},
		{"int32", int32(7)},
		{"binary naming another URN", []byte("urn:babel:orders:paid")},
		{"list naming another URN", []any{"urn:babel:orders:paid"}},
		{"map", map[string]any{"urn": "urn:babel:orders:paid"}},
		{"bool", true},
		{"null", nil},
		{"blank string", "  \t"},
	} {
		t.Run(tc.name+": routed on the body URN", func(t *testing.T) {
			msg := orderMessage(t, 0)
			msg.Annotations[AnnotationJMSType] = tc.value
			var urn string
			rec := newRecorder()
			dlq := &fakelink.Sender{}
			c := mustConsumer(t, Handlers{
				urnCreated: func(_ context.Context, env *Envelope, _ *amqp.Message) error {
					urn = env.URN()
					return nil
				},
				"urn:babel:orders:paid": neverCalled(t),
			}, WithOnError(rec.onError), WithDeadLetterSender(dlq))
			got := handleOne(t, c, rec, dlq, msg)
			assert.Equal(t, fakelink.Accepted, got.disp)
			assert.Empty(t, got.reports)
			assert.NoError(t, got.ret)
			assert.Equal(t, urnCreated, urn)
		})
	}
}
