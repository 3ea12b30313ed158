package artemis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// pipeSender is a pendingSender whose transfers are written at once and
// whose outcomes the test gives later, one by one, in any order: a link
// with receipts, as an *amqp.Sender has.
type pipeSender struct {
	mu      sync.Mutex
	written []*amqp.Message
	waits   outcomeChannels
	writeFn func(*amqp.Message) error // nil: every write succeeds
}

type outcomeOf struct {
	state amqp.DeliveryState
	err   error
}

// outcomeChannels hands out, by message-id, the channel on which the test
// gives a pipelined transfer its outcome; a message sent twice (a retry)
// waits on the same channel again.
type outcomeChannels struct {
	mu sync.Mutex
	ch map[string]chan outcomeOf
}

func (o *outcomeChannels) channel(id string) chan outcomeOf {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ch == nil {
		o.ch = map[string]chan outcomeOf{}
	}
	ch, ok := o.ch[id]
	if !ok {
		ch = make(chan outcomeOf, 1)
		o.ch[id] = ch
	}
	return ch
}

func newPipeSender() *pipeSender { return &pipeSender{} }

func (s *pipeSender) Send(context.Context, *amqp.Message, *amqp.SendOptions) error {
	panic("PublishWithReceipt must write through startOutcome")
}

func (s *pipeSender) startOutcome(_ context.Context, msg *amqp.Message) (pendingTransfer, error) {
	if s.writeFn != nil {
		if err := s.writeFn(msg); err != nil {
			return pendingTransfer{}, err
		}
	}
	ch := s.channel(msg.Properties.MessageID.(string))
	s.mu.Lock()
	s.written = append(s.written, msg)
	s.mu.Unlock()
	var got *outcomeOf
	return pendingTransfer{later: func(ctx context.Context) (amqp.DeliveryState, error) {
		if got != nil {
			return got.state, got.err
		}
		select {
		case o := <-ch:
			got = &o
			return o.state, o.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}, nil
}

func (s *pipeSender) channel(id string) chan outcomeOf { return s.waits.channel(id) }

// settle gives the transfer of message id its outcome.
func (s *pipeSender) settle(id string, state amqp.DeliveryState, err error) {
	s.channel(id) <- outcomeOf{state, err}
}

func (s *pipeSender) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.written)
}

func TestReceiptWaitReturnsTheBrokersOutcome(t *testing.T) {
	linkErr := &amqp.LinkError{}
	cases := map[string]struct {
		state       amqp.DeliveryState
		err         error
		notAccepted bool
	}{
		"accepted":  {state: &amqp.StateAccepted{}},
		"rejected":  {state: &amqp.StateRejected{Error: &amqp.Error{Condition: "amqp:resource-limit-exceeded"}}, notAccepted: true},
		"released":  {state: &amqp.StateReleased{}, notAccepted: true},
		"modified":  {state: &amqp.StateModified{DeliveryFailed: true}, notAccepted: true},
		"link lost": {err: linkErr},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := newPipeSender()
			p := NewPublisher(s, "orders")
			r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, map[string]int{"n": 1}))
			require.NoError(t, err)
			require.NotEmpty(t, r.ID())
			select {
			case <-r.Done():
				t.Fatal("resolved before the broker answered")
			default:
			}
			s.settle(r.ID(), tc.state, tc.err)
			err = r.Wait(context.Background())
			switch {
			case tc.err != nil:
				require.Error(t, err)
				assert.ErrorIs(t, err, linkErr)
				assert.NotErrorIs(t, err, ErrNotAccepted)
			case tc.notAccepted:
				require.ErrorIs(t, err, ErrNotAccepted)
				var oe *OutcomeError
				require.ErrorAs(t, err, &oe)
				assert.Equal(t, tc.state, oe.State)
				assert.Contains(t, err.Error(), "publish "+urnCreated+" to orders")
			default:
				assert.NoError(t, err)
			}
			assert.Equal(t, err, r.Wait(context.Background()), "a resolved receipt answers the same every time")
		})
	}
}

func TestReceiptWaitEndsWithItsContextAndTheOutcomeStillComes(t *testing.T) {
	s := newPipeSender()
	var mu sync.Mutex
	var reported []error
	done := make(chan struct{})
	p := NewPublisher(s, "orders", WithOnOutcome(func(id string, err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
		close(done)
	}))
	r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	err = r.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	s.settle(r.ID(), &amqp.StateAccepted{}, nil)
	require.NoError(t, r.Wait(context.Background()), "waiting again gets the outcome")
	<-done
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []error{nil}, reported, "reported once, as accepted")
}

func TestReceiptsNobodyWaitsOnAreReported(t *testing.T) {
	t.Run("to WithOnOutcome", func(t *testing.T) {
		s := newPipeSender()
		var mu sync.Mutex
		got := map[string]error{}
		var wg sync.WaitGroup
		p := NewPublisher(s, "orders", WithOnOutcome(func(id string, err error) {
			mu.Lock()
			_, twice := got[id]
			got[id] = err
			mu.Unlock()
			assert.False(t, twice, "reported twice: %s", id)
			wg.Done()
		}))
		var ids []string
		for i := range 20 {
			wg.Add(1)
			r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, map[string]int{"i": i}))
			require.NoError(t, err)
			ids = append(ids, r.ID())
		}
		for i, id := range ids {
			if i%3 == 0 {
				s.settle(id, &amqp.StateReleased{}, nil)
			} else {
				s.settle(id, &amqp.StateAccepted{}, nil)
			}
		}
		wg.Wait()
		require.Len(t, got, 20)
		for i, id := range ids {
			if i%3 == 0 {
				assert.ErrorIs(t, got[id], ErrNotAccepted, id)
			} else {
				assert.NoError(t, got[id], id)
			}
		}
	})
	t.Run("failures to slog.Default without a callback", func(t *testing.T) {
		var buf fakelink.LogBuffer
		prev := slog.Default()
		slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
		defer slog.SetDefault(prev)

		s := newPipeSender()
		p := NewPublisher(s, "orders")
		ok, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
		require.NoError(t, err)
		lost, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
		require.NoError(t, err)
		waited, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
		require.NoError(t, err)
		// A Wait that gave up (its ctx ended) still counts: the caller has
		// seen the receipt and knows to ask again.
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, waited.Wait(ended), context.Canceled)
		s.settle(ok.ID(), &amqp.StateAccepted{}, nil)
		s.settle(lost.ID(), &amqp.StateRejected{}, nil)
		s.settle(waited.ID(), &amqp.StateReleased{}, nil)
		require.ErrorIs(t, waited.Wait(context.Background()), ErrNotAccepted)
		<-lost.Done()
		<-ok.Done()
		log := buf.String()
		assert.Contains(t, log, "level=WARN")
		assert.Contains(t, log, lost.ID())
		assert.NotContains(t, log, ok.ID(), "an accepted publish is not logged")
		assert.NotContains(t, log, waited.ID(), "the waiter has the error")
		assert.Equal(t, 1, strings.Count(log, "\n"), log)
	})
}

// Many goroutines publish with receipts while the broker answers in a random
// order: every receipt gets its own transfer's outcome.
func TestPublishWithReceiptConcurrentOutOfOrderOutcomes(t *testing.T) {
	s := newPipeSender()
	p := NewPublisher(s, "orders")
	const workers, each = 8, 50
	type sent struct {
		r    *Receipt
		want bool // accepted
	}
	results := make(chan sent, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, map[string]int{"w": w, "i": i}))
				if !assert.NoError(t, err) {
					return
				}
				results <- sent{r: r}
			}
		}()
	}
	wg.Wait()
	close(results)
	var all []sent
	for r := range results {
		all = append(all, r)
	}
	require.Len(t, all, workers*each)
	require.Equal(t, workers*each, s.count())
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	ids := map[string]bool{}
	for i := range all {
		all[i].want = rng.IntN(2) == 0
		ids[all[i].r.ID()] = true
		if all[i].want {
			s.settle(all[i].r.ID(), &amqp.StateAccepted{}, nil)
		} else {
			s.settle(all[i].r.ID(), &amqp.StateRejected{}, nil)
		}
	}
	require.Len(t, ids, workers*each, "every receipt has its own meta.id")
	for _, x := range all {
		err := x.r.Wait(context.Background())
		if x.want {
			assert.NoError(t, err)
		} else {
			assert.ErrorIs(t, err, ErrNotAccepted)
		}
	}
}

// Over a Sender that answers synchronously, the receipt is resolved when
// PublishWithReceipt returns.
func TestPublishWithReceiptOverASynchronousSender(t *testing.T) {
	for name, out := range map[string]func(context.Context, *amqp.Message) (amqp.DeliveryState, error){
		"accept": fakelink.Accept, "reject": fakelink.Reject,
	} {
		for _, plain := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s plain=%v", name, plain), func(t *testing.T) {
				fs := &fakelink.Sender{Outcome: out}
				var s Sender = fs
				if plain {
					s = fakelink.PlainSender{S: fs}
				}
				r, err := NewPublisher(s, "orders").PublishWithReceipt(context.Background(), Job(urnCreated, nil))
				if plain && name == "reject" {
					// A plain Sender's Send fails on a rejection: nothing to wait for.
					require.Error(t, err)
					assert.Nil(t, r)
					return
				}
				require.NoError(t, err)
				select {
				case <-r.Done():
				default:
					t.Fatal("not resolved")
				}
				require.Len(t, fs.Sent(), 1)
				assert.Equal(t, r.ID(), fs.Sent()[0].Properties.MessageID)
				if name == "reject" {
					assert.ErrorIs(t, r.Wait(context.Background()), ErrNotAccepted)
				} else {
					assert.NoError(t, r.Wait(context.Background()))
				}
			})
		}
	}
	t.Run("closed link", func(t *testing.T) {
		fs := &fakelink.Sender{Outcome: fakelink.Closed}
		var reported error
		r, err := NewPublisher(fs, "orders").PublishWithReceipt(context.Background(), Job(urnCreated, nil), WithOnOutcome(func(_ string, err error) { reported = err }))
		require.ErrorIs(t, err, fakelink.ErrLinkClosed)
		assert.Nil(t, r)
		assert.Equal(t, err, reported, "the failure is reported once")
	})
}

func TestPublishWithReceiptRefusesBadInputAndSendsNothing(t *testing.T) {
	s := newPipeSender()
	p := NewPublisher(s, "orders")
	cases := map[string]struct {
		m    Outgoing
		opts []PublishOption
		want error
	}{
		"blank URN":       {m: Job(" ", nil), want: ErrInvalidEnvelope},
		"priority 10":     {m: Job(urnCreated, nil), opts: []PublishOption{WithPriority(10)}, want: ErrInvalidConfig},
		"negative TTL":    {m: Job(urnCreated, nil), opts: []PublishOption{WithTTL(-time.Second)}, want: ErrInvalidConfig},
		"foreign traceID": {m: Job(urnCreated, nil, EnvelopeTraceID("t")), want: nil},
		"bad trace id":    {m: Job(urnCreated, nil, EnvelopeTraceID("t\xfe")), want: ErrInvalidEnvelope},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before := s.count()
			r, err := p.PublishWithReceipt(context.Background(), tc.m, tc.opts...)
			if tc.want == nil {
				require.NoError(t, err)
				s.settle(r.ID(), &amqp.StateAccepted{}, nil)
				require.NoError(t, r.Wait(context.Background()))
				return
			}
			require.ErrorIs(t, err, tc.want)
			assert.Nil(t, r)
			assert.Equal(t, before, s.count(), "nothing written")
		})
	}
	t.Run("envelope keeps its trace id", func(t *testing.T) {
		env, err := NewEnvelope(urnCreated, nil, EnvelopeTraceID("mine"))
		require.NoError(t, err)
		before := s.count()
		r, err := p.PublishWithReceipt(context.Background(), env)
		require.NoError(t, err)
		assert.Equal(t, env.Meta.ID, r.ID())
		assert.Equal(t, "mine", wireDecoded(t, s.written[before]).Properties.CorrelationID)
		s.settle(r.ID(), &amqp.StateAccepted{}, nil)
		require.NoError(t, r.Wait(context.Background()))
	})
	t.Run("write fails", func(t *testing.T) {
		boom := errors.New("write failed")
		s := newPipeSender()
		s.writeFn = func(*amqp.Message) error { return boom }
		r, err := NewPublisher(s, "orders").PublishWithReceipt(context.Background(), Job(urnCreated, nil))
		require.ErrorIs(t, err, boom)
		assert.Nil(t, r)
	})
}

// The receipt's message is the one Publish sends: the same projection and
// options.
func TestPublishWithReceiptSendsWhatPublishSends(t *testing.T) {
	s := newPipeSender()
	p := NewPublisher(s, "orders", WithPriority(8))
	opts := []PublishOption{WithHeaders(map[string]string{"traceparent": "00-a-b-01"}), WithTTL(time.Minute),
		WithGroupID("customer-7"), WithDuplicateDetection(), WithDelay(time.Hour)}
	r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, map[string]int{"n": 1}, EnvelopeTraceID("trace-1")), opts...)
	require.NoError(t, err)
	s.settle(r.ID(), &amqp.StateAccepted{}, nil)
	require.NoError(t, r.Wait(context.Background()))
	msg := wireDecoded(t, s.written[0])

	fs := &fakelink.Sender{}
	id, err := NewPublisher(fs, "orders", WithPriority(8)).Publish(context.Background(), Job(urnCreated, map[string]int{"n": 1}, EnvelopeTraceID("trace-1")), opts...)
	require.NoError(t, err)
	want := wireDecoded(t, fs.Sent()[0])

	assert.Equal(t, r.ID(), msg.Properties.MessageID)
	assert.Equal(t, id, want.Properties.MessageID)
	assert.Equal(t, "trace-1", msg.Properties.CorrelationID)
	assert.Equal(t, want.Header, msg.Header)
	assert.Equal(t, "customer-7", *msg.Properties.GroupID)
	assert.Equal(t, uint8(8), msg.Header.Priority)
	assert.Equal(t, time.Minute, msg.Header.TTL)
	assert.Equal(t, r.ID(), msg.ApplicationProperties[PropDuplicateID])
	assert.Equal(t, "00-a-b-01", msg.ApplicationProperties["traceparent"])
	assert.Contains(t, msg.Annotations, AnnotationDeliveryTime)
	delete(msg.ApplicationProperties, PropDuplicateID)
	delete(want.ApplicationProperties, PropDuplicateID)
	assert.Equal(t, want.ApplicationProperties, msg.ApplicationProperties)
}

// A publish with a receipt is observed once, when its outcome arrives, with
// the same outcome Wait returns, whether or not anyone waits.
func TestReceiptsAreObserved(t *testing.T) {
	cases := map[string]struct {
		state   amqp.DeliveryState
		outcome PublishOutcome
	}{
		"accepted": {&amqp.StateAccepted{}, PublishAccepted},
		"rejected": {&amqp.StateRejected{}, PublishNotAccepted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obs := &observed{}
			s := newPipeSender()
			p := NewPublisher(s, "orders", WithObserver(obs))
			r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, map[string]int{"n": 1}))
			require.NoError(t, err)
			assert.Empty(t, obs.publishes(), "not observed before the outcome")
			s.settle(r.ID(), tc.state, nil)
			<-r.Done()
			evs := obs.publishes()
			require.Len(t, evs, 1)
			assert.Equal(t, tc.outcome, evs[0].Outcome)
			assert.Equal(t, r.ID(), evs[0].MessageID)
			assert.Equal(t, "orders", evs[0].Queue)
			assert.Equal(t, r.Wait(context.Background()), evs[0].Err)
		})
	}
	t.Run("refused before anything is sent", func(t *testing.T) {
		obs := &observed{}
		p := NewPublisher(newPipeSender(), "orders", WithObserver(obs))
		_, err := p.PublishWithReceipt(context.Background(), Job(" ", nil))
		require.ErrorIs(t, err, ErrInvalidEnvelope)
		evs := obs.publishes()
		require.Len(t, evs, 1)
		assert.Equal(t, PublishFailed, evs[0].Outcome)
	})
}

// A WithOnOutcome callback that panics or exits its goroutine on the
// resolver neither crashes the process nor stops the resolver: the
// receipts after it (in the same batch or later) still resolve.
func TestReceiptResolverSurvivesItsOutcomeCallback(t *testing.T) {
	for _, tc := range []struct {
		name string
		die  func()
	}{
		{"panic", func() { panic("callback bug") }},
		{"goexit", runtime.Goexit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			s := newPipeSender()
			p := NewPublisher(s, "orders", WithOnOutcome(func(string, error) {
				if calls.Add(1) == 1 {
					tc.die()
				}
			}))
			r1, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
			require.NoError(t, err)
			r2, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
			require.NoError(t, err)
			s.settle(r2.ID(), &amqp.StateAccepted{}, nil)
			s.settle(r1.ID(), &amqp.StateAccepted{}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, r1.Wait(ctx))
			require.NoError(t, r2.Wait(ctx), "the receipt behind the callback's failure resolves")

			// A receipt written afterwards resolves too.
			r3, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
			require.NoError(t, err)
			s.settle(r3.ID(), &amqp.StateAccepted{}, nil)
			require.NoError(t, r3.Wait(ctx))
			assert.Eventually(t, func() bool { return calls.Load() == 3 }, 5*time.Second, time.Millisecond)
		})
	}
}

// A panic in the callback on the calling goroutine (Publish, a synchronous
// Sender) is recovered too: the publish returns its own result.
func TestPublishSurvivesAPanickingOutcomeCallback(t *testing.T) {
	p := NewPublisher(&fakelink.Sender{}, "orders", WithOnOutcome(func(string, error) { panic("callback bug") }))
	id, err := p.Publish(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	assert.NotEmpty(t, id)
	r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
}

// TestARefusedPublishIsReportedToOnOutcome: a publish refused before
// anything is sent (here an invalid priority) is reported to WithOnOutcome
// exactly once, through Publish and PublishWithReceipt alike, whatever the
// Sender.
func TestARefusedPublishIsReportedToOnOutcome(t *testing.T) {
	for name, s := range map[string]Sender{"fakelink": &fakelink.Sender{}, "plain": fakelink.PlainSender{S: &fakelink.Sender{}}} {
		for _, receipt := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/receipt=%t", name, receipt), func(t *testing.T) {
				var reported []error
				p := NewPublisher(s, "orders", WithOnOutcome(func(_ string, err error) { reported = append(reported, err) }))
				var err error
				if receipt {
					_, err = p.PublishWithReceipt(context.Background(), Job(urnCreated, nil), WithPriority(10))
				} else {
					_, err = p.Publish(context.Background(), Job(urnCreated, nil), WithPriority(10))
				}
				require.ErrorIs(t, err, ErrInvalidConfig)
				if assert.Len(t, reported, 1, "reported once") {
					assert.Equal(t, err, reported[0])
				}
			})
		}
	}
}

// A receipt whose Observer ends the resolving goroutine (runtime.Goexit)
// is still resolved: Wait and Done do not hang on it.
func TestReceiptResolvesThoughItsObserverExitsTheGoroutine(t *testing.T) {
	cfg := &publishConfig{observer: exitingObserver{}}
	r := &Receipt{id: "id-1", urn: urnCreated, queue: "orders", observed: cfg, built: true}
	go r.resolve(&amqp.StateAccepted{}, nil)
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the receipt never resolved")
	}
	assert.NoError(t, r.Wait(context.Background()))
}

// A failed receipt nobody waits on is logged to slog.Default() by the
// resolver's goroutine: a default logger whose handler panics does not end
// it (nor the process), and the receipt still resolves.
func TestUnwaitedReceiptSurvivesAPanickingDefaultLogger(t *testing.T) {
	prev := slog.Default()
	slog.SetDefault(slog.New(exitingHandler{panics: true}))
	t.Cleanup(func() { slog.SetDefault(prev) })
	r := &Receipt{id: "id-1", urn: urnCreated, queue: "orders", built: true}
	ended := make(chan string, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ended <- fmt.Sprint("panicked: ", p)
			}
		}()
		r.resolve(&amqp.StateRejected{}, nil)
		ended <- "returned"
	}()
	select {
	case how := <-ended:
		assert.Equal(t, "returned", how)
	case <-time.After(5 * time.Second):
		t.Fatal("the resolver never ended")
	}
	assert.ErrorIs(t, r.Wait(context.Background()), ErrNotAccepted)
}

// An Observer that ends the resolver's goroutine does not take the
// receipt's report with it: the WithOnOutcome callback still hears the
// outcome, and without one a failure nobody waits on is still logged.
func TestReceiptIsReportedThoughItsObserverExitsTheGoroutine(t *testing.T) {
	cfg := &publishConfig{observer: exitingObserver{}}
	heard := make(chan error, 1)
	r := &Receipt{id: "id-1", urn: urnCreated, queue: "orders", observed: cfg, built: true,
		onOutcome: func(_ string, err error) { heard <- err }}
	go r.resolve(&amqp.StateRejected{}, nil)
	select {
	case err := <-heard:
		assert.ErrorIs(t, err, ErrNotAccepted)
	case <-time.After(5 * time.Second):
		t.Fatal("the outcome callback never ran")
	}

	logs := captureDefaultLog(t)
	r = &Receipt{id: "id-2", urn: urnCreated, queue: "orders", observed: cfg, built: true}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		r.resolve(&amqp.StateRejected{}, nil)
	}()
	<-ended
	assert.Contains(t, logs.String(), "receipt not waited on")
	assert.Contains(t, logs.String(), "id-2")
}
