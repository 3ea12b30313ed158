package artemis

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDialTriesTheURLsInTurn(t *testing.T) {
	live := "amqp://babel:" + secret + "@live.example:5672"
	backup := "amqp://babel:" + secret + "@backup.example:5672"
	h := newHarness(t, []string{live, backup}, nil, func(fb *fakeBroker) {
		fb.dialErr = func(_ int, b *broker) error {
			if strings.Contains(b.addr, "live") {
				return refused
			}
			return nil
		}
	})
	require.NoError(t, h.dial())

	assert.Equal(t, []string{"amqp://live.example:5672", "amqp://backup.example:5672"}, h.fb.dialed(),
		"the URLs are dialed in order, without their userinfo")
	for _, b := range h.fb.dials {
		assert.True(t, b.plain)
		assert.Equal(t, "babel", b.user)
		assert.Equal(t, secret, b.pass, "the userinfo password travels as the SASL PLAIN credential")
	}
	evs := h.ev.list()
	require.Len(t, evs, 2)
	assert.Equal(t, EventDialFailed, evs[0].Kind)
	assert.Equal(t, "amqp://babel:xxxxx@live.example:5672", evs[0].URL)
	assert.ErrorIs(t, evs[0].Err, refused)
	assert.Equal(t, EventConnected, evs[1].Kind)
	assert.Equal(t, "amqp://babel:xxxxx@backup.example:5672", evs[1].URL)
	assert.NotContains(t, h.log.String(), secret)
}

func TestDialFailsWhenNoURLAnswers(t *testing.T) {
	h := newHarness(t, []string{"amqp://babel:" + secret + "@a.example", "amqps://b.example:5671"}, nil, func(fb *fakeBroker) {
		fb.dialErr = func(int, *broker) error { return refused }
	})
	err := h.dial()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrConnect)
	var op *net.OpError
	assert.ErrorAs(t, err, &op, "the cause stays reachable when it shows no secret")
	assert.Contains(t, err.Error(), "amqp://babel:xxxxx@a.example")
	assert.Contains(t, err.Error(), "amqps://b.example:5671")
	assert.NotContains(t, err.Error(), secret)
	assert.Equal(t, []ConnectionEventKind{EventDialFailed, EventDialFailed}, h.ev.kinds())
}

func TestDialTimeoutMovesOnToTheNextURL(t *testing.T) {
	h := newHarness(t, []string{"amqp://black.hole:5672", "amqp://backup:5672"}, &ClientOptions{DialTimeout: 20 * time.Millisecond},
		func(fb *fakeBroker) {
			fb.block = func(ctx context.Context, b *broker) error {
				if strings.Contains(b.addr, "black.hole") {
					<-ctx.Done() // a host that never answers
					return ctx.Err()
				}
				return nil
			}
		})
	require.NoError(t, h.dial())
	evs := h.ev.list()
	require.Len(t, evs, 2)
	assert.Equal(t, EventDialFailed, evs[0].Kind)
	assert.ErrorIs(t, evs[0].Err, context.DeadlineExceeded)
	assert.Contains(t, evs[0].Err.Error(), "no connection within 20ms")
	assert.Equal(t, EventConnected, evs[1].Kind)
}

func TestReconnectStartsWithTheURLAfterTheLostOne(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, nil, nil)
	require.NoError(t, h.dial())
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)

	cn, err := h.b.connection(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "amqp://backup:5672", cn.url)
	assert.Equal(t, []string{"amqp://live:5672", "amqp://backup:5672"}, h.fb.dialed())
	assert.Equal(t, EventReconnected, h.ev.wait(t, EventReconnected).Kind)
}

func TestConcurrentCallersShareOneDial(t *testing.T) {
	const callers = 16
	release := make(chan struct{})
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.block = func(context.Context, *broker) error {
			if fb.connCount() > 0 {
				<-release // the re-dial hangs until every other caller waits for it
			}
			return nil
		}
	})
	joined := make(chan struct{}, callers)
	h.b.joined = func() { joined <- struct{}{} }
	require.NoError(t, h.dial())
	h.fb.conn(0).kill(nil)

	var wg sync.WaitGroup
	conns := make(chan *connection, callers)
	for range callers {
		wg.Go(func() {
			cn, err := h.b.connection(context.Background())
			assert.NoError(t, err)
			conns <- cn
		})
	}
	for i := range callers - 1 {
		select {
		case <-joined:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d callers waited for the dial in flight", i)
		}
	}
	close(release)
	wg.Wait()
	close(conns)
	assert.Equal(t, 2, h.fb.connCount(), "one dial for the first connection, one for all the callers after the loss")
	assert.Len(t, h.fb.dialed(), 2)
	for cn := range conns {
		assert.Same(t, h.fb.conn(1), cn.conn)
	}
}

// A dial that succeeds after every caller stopped waiting for it closes its
// connection without holding the Client's lock: a close that hangs (on a
// half-open network go-amqp waits up to the idle timeout for the broker's
// answer) holds up no other caller.
func TestAnAbandonedDialClosesItsConnectionOutsideTheLock(t *testing.T) {
	release, closing, unblock := make(chan struct{}), make(chan struct{}), make(chan struct{})
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.block = func(context.Context, *broker) error {
			if fb.connCount() == 1 {
				<-release // the second dial ends when the test says, whatever its ctx
			}
			return nil
		}
		fb.setup = func(c *fakeConn) {
			if fb.connCount() == 2 {
				c.closeHook = func() { close(closing); <-unblock }
			}
		}
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(unblock) }) }) // before the harness closes the Client
	require.NoError(t, h.dial())
	h.fb.conn(0).kill(nil)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := h.b.connection(ctx); errc <- err }()
	require.Eventually(t, func() bool { return len(h.fb.dialed()) == 2 }, 5*time.Second, time.Millisecond, "the re-dial never started")
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	close(release)
	select {
	case <-closing:
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned dial's connection was never closed")
	}

	// That close still hangs; another caller gets a connection meanwhile.
	got := make(chan error, 1)
	go func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		cn, err := h.b.connection(cctx)
		if err == nil && cn.conn != amqpConn(h.fb.conn(2)) {
			err = fmt.Errorf("got connection %v, want the third one", cn.conn)
		}
		got <- err
	}()
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("a caller waited 5s behind the close of a connection nobody wanted")
	}
	once.Do(func() { close(unblock) })
}

// fakeClock is a virtual clock for the Client's after seam: every wait
// moves the clock on by its length and fires at once, so a 20 s outage
// takes no real time.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Duration
	delays []time.Duration
}

func (f *fakeClock) after(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	f.now += d
	f.delays = append(f.delays, d)
	f.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func (f *fakeClock) elapsed() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.delays...)
}

// countLines counts the log lines whose message is msg.
func countLines(log, msg string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"msg":"`+msg+`"`) {
			n++
		}
	}
	return n
}

func countKind(evs []ConnectionEvent, kind ConnectionEventKind) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

func TestPublishRidesOutAnOutage(t *testing.T) {
	const (
		publishers = 8
		each       = 5
		outage     = 20 * time.Second
	)
	clock := &fakeClock{}
	var down sync.Mutex
	outageOn := false
	h := newHarness(t, []string{"amqp://live:5672"}, nil, func(fb *fakeBroker) {
		fb.dialErr = func(int, *broker) error {
			down.Lock()
			defer down.Unlock()
			if outageOn && clock.elapsed() < outage {
				return refused
			}
			return nil
		}
	})
	h.b.after = clock.after
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)

	down.Lock()
	outageOn = true
	down.Unlock()
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)

	var wg sync.WaitGroup
	errs := make(chan error, publishers*each)
	for range publishers {
		wg.Go(func() {
			for range each {
				_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "every publish waits for the connection and succeeds")
	}
	assert.Len(t, h.keptOn("orders"), publishers*each)

	// The dial rounds the backoff allows in a 20 s outage: one at once,
	// then one after each step, until the clock has passed the outage.
	failedRounds, at := 0, time.Duration(0)
	for at < outage {
		at += h.b.backoff.Delay(failedRounds, 0.5)
		failedRounds++
	}
	dials := len(h.fb.dialed()) - 1 // less the first connection
	assert.Equal(t, failedRounds+1, dials, "one dial per backoff step, not one per publish")
	assert.Len(t, clock.waits(), failedRounds, "one backoff wait per failed round")
	evs := h.ev.list()
	assert.Equal(t, failedRounds, countKind(evs, EventDialFailed))
	assert.Equal(t, failedRounds, countKind(evs, EventBackoff), "the Client's wait is reported once per step")
	assert.Equal(t, 1, countKind(evs, EventDisconnected))
	assert.Equal(t, 1, countKind(evs, EventReconnected))
	log := h.log.String()
	assert.Equal(t, failedRounds, countLines(log, "dial failed"), "a warn line per step, not per call")
	assert.Equal(t, failedRounds, countLines(log, "backing off"))
	assert.Equal(t, 1, countLines(log, "reconnected"))
	for i, d := range clock.waits() {
		assert.Equal(t, h.b.backoff.Delay(i, 0.5), d, "step %d", i+1)
	}
	t.Logf("outage %v: %d publishes by %d goroutines, %d dials, %d dial_failed lines, %d backoff lines",
		outage, publishers*each, publishers, dials, countLines(log, "dial failed"), countLines(log, "backing off"))
}

func TestPublishDuringAnOutageEndsWithItsContext(t *testing.T) {
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.dialErr = func(n int, _ *broker) error {
			if n > 1 {
				return refused
			}
			return nil
		}
	})
	h.timers.hold = true // the outage outlasts the publish
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	id, err := p.Publish(ctx, Job(urnCreated, orderData))
	require.Error(t, err)
	assert.Empty(t, id)
	assert.ErrorIs(t, err, ErrConnect, "nothing was sent")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, refused, "the last round's failure is quoted")
	assert.NotErrorIs(t, err, ErrOutcomeUnknown)
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Empty(t, h.sentTo("orders"), "nothing was sent")
}

func TestPublishWaitingForTheConnectionEndsAtClose(t *testing.T) {
	hanging := make(chan struct{}, 1)
	h, p := newPublisherHarness(t, func(fb *fakeBroker) {
		fb.block = func(ctx context.Context, _ *broker) error {
			if fb.connCount() > 0 {
				select {
				case hanging <- struct{}{}:
				default:
				}
				<-ctx.Done() // the re-dial hangs: only Close can end it
				return ctx.Err()
			}
			return nil
		}
	})
	joined := make(chan struct{}, 16)
	h.b.joined = func() { joined <- struct{}{} }
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)

	const waiting = 4
	errs := make(chan error, waiting)
	for range waiting {
		go func() {
			_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
			errs <- err
		}()
	}
	for range waiting - 1 {
		select {
		case <-joined:
		case <-time.After(5 * time.Second):
			t.Fatal("the publishers did not share the dial")
		}
	}
	// Close once the re-dial hangs: the publishers may join the dial round
	// before its dial has begun, on a slow machine.
	select {
	case <-hanging:
	case <-time.After(5 * time.Second):
		t.Fatal("the re-dial never began")
	}
	require.NoError(t, h.c.Close(context.Background()))
	for range waiting {
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, ErrClosed)
			assert.ErrorIs(t, err, ErrConnect, "nothing was sent")
		case <-time.After(5 * time.Second):
			t.Fatal("a publish waiting on the dial outlived Close")
		}
	}
	assert.Empty(t, h.sentTo("orders"))
	assert.Len(t, h.fb.dialed(), 2, "the hanging dial was the only one, and Close cut it short")
}

func TestFailFastPublishDoesNotWait(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, &ClientOptions{FailFast: true}, func(fb *fakeBroker) {
		fb.dialErr = func(n int, _ *broker) error {
			if n > 1 {
				return refused
			}
			return nil
		}
	})
	h.timers.hold = true // the backoff step after the first failed round never ends
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)

	for i := range 20 {
		_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
		assert.ErrorIs(t, err, ErrConnect, "publish %d", i)
		assert.ErrorIs(t, err, refused)
	}
	assert.Len(t, h.fb.dialed(), 2, "one round, then the backoff step: no dial per publish")
	assert.Equal(t, 1, countKind(h.ev.list(), EventDialFailed))
	assert.Empty(t, h.sentTo("orders"))
}
