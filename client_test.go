package artemis

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
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

// The fakes below stand in for go-amqp behind the Client's dial seam: a
// fakeBroker hands out fakeConns, each its own session, whose links are
// fakelink links that fail as go-amqp's do when their connection dies.

type fakeBroker struct {
	t *testing.T

	mu      sync.Mutex
	dials   []*broker   // every dial attempt, in order
	conns   []*fakeConn // every connection opened, in order
	dialErr func(n int, b *broker) error
	block   func(ctx context.Context, b *broker) error // runs before dialErr; may wait on ctx
	setup   func(c *fakeConn)                          // prepares each new connection
}

func newFakeBroker(t *testing.T) *fakeBroker { return &fakeBroker{t: t} }

func (f *fakeBroker) dial(ctx context.Context, b *broker) (amqpConn, error) {
	f.mu.Lock()
	f.dials = append(f.dials, b)
	n := len(f.dials)
	block, dialErr := f.block, f.dialErr
	f.mu.Unlock()
	if block != nil {
		if err := block(ctx, b); err != nil {
			return nil, err
		}
	}
	if dialErr != nil {
		if err := dialErr(n, b); err != nil {
			return nil, err
		}
	}
	c := &fakeConn{t: f.t, addr: b.addr, done: make(chan struct{})}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	setup := f.setup
	f.mu.Unlock()
	if setup != nil {
		setup(c)
	}
	return c, nil
}

func (f *fakeBroker) dialed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.dials))
	for i, b := range f.dials {
		out[i] = b.addr
	}
	return out
}

func (f *fakeBroker) conn(i int) *fakeConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Less(f.t, i, len(f.conns), "connection %d was never opened", i)
	return f.conns[i]
}

func (f *fakeBroker) connCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// fakeConn is a connection and its session.
type fakeConn struct {
	t    *testing.T
	addr string

	done chan struct{}
	once sync.Once
	err  error

	mu        sync.Mutex
	senders   []*fakeSender
	receivers []*fakeReceiver

	// outcome decides the transfers of senders attached from now on.
	outcome func(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error)
	// attachErr, when set, refuses attaches to the address.
	attachErr func(addr string, receiver bool) error
	// deliveries are queued on each receiver attached from now on.
	deliveries func() []*amqp.Message
	// attached hears of every receiver attached.
	attached chan *fakeReceiver
}

func (c *fakeConn) NewSession(context.Context, *amqp.SessionOptions) (amqpSession, error) {
	return c, nil
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }

func (c *fakeConn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

func (c *fakeConn) Close() error {
	c.kill(nil)
	return nil
}

// kill ends the connection as a broker restart does: every link fails with
// a *amqp.ConnError.
func (c *fakeConn) kill(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
		c.mu.Lock()
		rs := append([]*fakeReceiver(nil), c.receivers...)
		c.mu.Unlock()
		for _, r := range rs {
			r.Fail(&amqp.ConnError{})
		}
	})
}

func (c *fakeConn) dead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *fakeConn) NewSender(_ context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	if c.dead() {
		return nil, &amqp.ConnError{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.attachErr != nil {
		if err := c.attachErr(target, false); err != nil {
			return nil, err
		}
	}
	s := &fakeSender{Sender: &fakelink.Sender{Outcome: c.outcome}, conn: c, target: target, opts: opts}
	c.senders = append(c.senders, s)
	return s, nil
}

func (c *fakeConn) NewReceiver(_ context.Context, source string, opts *amqp.ReceiverOptions) (linkReceiver, error) {
	if c.dead() {
		return nil, &amqp.ConnError{}
	}
	c.mu.Lock()
	if c.attachErr != nil {
		if err := c.attachErr(source, true); err != nil {
			c.mu.Unlock()
			return nil, err
		}
	}
	r := &fakeReceiver{Receiver: fakelink.NewReceiver(c.t, source), source: source, opts: opts}
	if c.deliveries != nil {
		for _, m := range c.deliveries() {
			r.Push(m)
		}
	}
	c.receivers = append(c.receivers, r)
	attached := c.attached
	c.mu.Unlock()
	if attached != nil {
		attached <- r
	}
	return r, nil
}

func (c *fakeConn) sendersTo(addr string) []*fakeSender {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*fakeSender
	for _, s := range c.senders {
		if s.target == addr {
			out = append(out, s)
		}
	}
	return out
}

func (c *fakeConn) receiverList() []*fakeReceiver {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*fakeReceiver(nil), c.receivers...)
}

type fakeSender struct {
	*fakelink.Sender
	conn   *fakeConn
	target string
	opts   *amqp.SenderOptions
	closed atomic.Bool
}

func (s *fakeSender) SendOutcome(ctx context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
	if s.conn.dead() {
		return nil, &amqp.ConnError{}
	}
	if s.closed.Load() {
		return nil, &amqp.LinkError{}
	}
	return s.Sender.SendOutcome(ctx, m)
}

func (s *fakeSender) Send(ctx context.Context, m *amqp.Message, _ *amqp.SendOptions) error {
	state, err := s.SendOutcome(ctx, m)
	if err != nil {
		return err
	}
	return outcomeError(state)
}

func (s *fakeSender) Close(context.Context) error {
	s.closed.Store(true)
	return nil
}

type fakeReceiver struct {
	*fakelink.Receiver
	source string
	opts   *amqp.ReceiverOptions
	closed atomic.Bool
}

func (r *fakeReceiver) Close(context.Context) error {
	r.closed.Store(true)
	r.Fail(&amqp.LinkError{})
	return nil
}

// events records every ConnectionEvent.
type events struct {
	mu  sync.Mutex
	all []ConnectionEvent
	ch  chan ConnectionEvent
}

func newEvents() *events { return &events{ch: make(chan ConnectionEvent, 4096)} }

func (e *events) on(ev ConnectionEvent) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	e.ch <- ev
}

func (e *events) list() []ConnectionEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]ConnectionEvent(nil), e.all...)
}

// kinds lists the kinds seen, leaving out EventDisconnected, which the
// connection watcher reports from its own goroutine at its own pace.
func (e *events) kinds() []ConnectionEventKind {
	var out []ConnectionEventKind
	for _, ev := range e.list() {
		if ev.Kind != EventDisconnected {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// wait returns the next event of kind, failing the test after a while.
func (e *events) wait(t *testing.T, kind ConnectionEventKind) ConnectionEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event; saw %v", kind, e.kinds())
			return ConnectionEvent{}
		}
	}
}

// fakeTimers replaces time.After: it records every wait, and fires at once
// unless hold is set.
type fakeTimers struct {
	hold   bool
	delays chan time.Duration
}

func newFakeTimers() *fakeTimers { return &fakeTimers{delays: make(chan time.Duration, 4096)} }

func (f *fakeTimers) after(d time.Duration) <-chan time.Time {
	f.delays <- d
	ch := make(chan time.Time, 1)
	if !f.hold {
		ch <- time.Time{}
	}
	return ch
}

// next returns the next recorded wait.
func (f *fakeTimers) next(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-f.delays:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no backoff wait was started")
		return 0
	}
}

type harness struct {
	t      *testing.T
	fb     *fakeBroker
	ev     *events
	timers *fakeTimers
	log    *syncBuffer
	c      *Client
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newHarness builds a Client over a fake broker, without dialing. The
// random source always answers 0.5; timers fire at once.
func newHarness(t *testing.T, urls []string, opts *ClientOptions, prepare func(*fakeBroker)) *harness {
	t.Helper()
	h := &harness{t: t, fb: newFakeBroker(t), ev: newEvents(), timers: newFakeTimers(), log: &syncBuffer{}}
	if prepare != nil {
		prepare(h.fb)
	}
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	o.OnEvent = h.ev.on
	o.Logger = slog.New(slog.NewJSONHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := newClient(urls, &o, h.fb.dial)
	require.NoError(t, err)
	c.random = func() float64 { return 0.5 }
	c.after = h.timers.after
	h.c = c
	t.Cleanup(func() { _ = c.Close() })
	return h
}

// dial is what Dial does after building the Client.
func (h *harness) dial() error {
	_, err := h.c.connection(context.Background())
	return err
}

var refused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}

const secret = "s3cr3t-Pa55"

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

// allTexts returns the text of err and of every error it wraps.
func allTexts(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error()}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, allTexts(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, allTexts(e)...)
		}
	}
	return out
}

func TestDialErrorsNeverShowThePassword(t *testing.T) {
	const odd = "p@ss w/rd:%" // escaped in the URL as p%40ss%20w%2Frd:%25
	escaped := "p%40ss%20w%2Frd:%25"
	cases := []struct {
		name string
		url  string
		opts *ClientOptions
		pass string
		// fail is what the fake go-amqp returns; raw is the URL it was given
		// as the user wrote it.
		fail func(raw string) error
	}{
		{
			name: "SASL failure, credentials in the URL",
			url:  "amqp://babel:" + secret + "@broker.example:5672",
			pass: secret,
			fail: func(string) error { return errors.New("SASL PLAIN auth failed with code 0x1: ") },
		},
		{
			name: "SASL failure, credentials in the options",
			url:  "amqp://broker.example:5672",
			opts: &ClientOptions{Username: "babel", Password: secret},
			pass: secret,
			fail: func(string) error { return errors.New("SASL PLAIN auth failed with code 0x1: ") },
		},
		{
			name: "an error quoting the whole URL",
			url:  "amqp://babel:" + secret + "@broker.example:5672",
			pass: secret,
			fail: func(raw string) error { return fmt.Errorf("dial %s: %w", raw, refused) },
		},
		{
			name: "an error quoting an escaped password",
			url:  "amqp://babel:" + escaped + "@broker.example:5672",
			pass: odd,
			fail: func(raw string) error { return fmt.Errorf("cannot dial %q", raw) },
		},
		{
			name: "an error quoting the decoded password deep in a chain",
			url:  "amqp://babel:" + escaped + "@broker.example:5672",
			pass: odd,
			fail: func(string) error {
				return fmt.Errorf("outer: %w", errors.Join(refused, errors.New("credential "+odd+" refused")))
			},
		},
		{
			name: "an options password quoted by the error",
			url:  "amqp://broker.example:5672",
			opts: &ClientOptions{Username: "babel", Password: secret},
			pass: secret,
			fail: func(string) error {
				return &amqp.ConnError{RemoteErr: &amqp.Error{Description: "bad password " + secret}}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []string{tc.url}, tc.opts, func(fb *fakeBroker) {
				fb.dialErr = func(int, *broker) error { return tc.fail(tc.url) }
			})
			err := h.dial()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrConnect)
			assert.Contains(t, err.Error(), "broker.example:5672", "the error names the broker")
			for _, text := range allTexts(err) {
				assert.NotContains(t, text, tc.pass)
				assert.NotContains(t, text, escaped)
			}
			for _, ev := range h.ev.list() {
				assert.NotContains(t, ev.URL, tc.pass)
				for _, text := range allTexts(ev.Err) {
					assert.NotContains(t, text, tc.pass)
					assert.NotContains(t, text, escaped)
				}
			}
			assert.NotContains(t, h.log.String(), tc.pass)
			assert.NotContains(t, h.log.String(), escaped)
			assert.NotEmpty(t, h.log.String(), "the failure was logged")
		})
	}
}

func TestDialCredentials(t *testing.T) {
	cases := []struct {
		name      string
		url       string
		opts      *ClientOptions
		plain     bool
		user      string
		pass      string
		wantAddr  string
		wantShown string
	}{
		{"userinfo", "amqp://u1:p1@h:5672", nil, true, "u1", "p1", "amqp://h:5672", "amqp://u1:xxxxx@h:5672"},
		{"options win over userinfo", "amqp://u1:p1@h:5672", &ClientOptions{Username: "u2", Password: "p2"}, true, "u2", "p2", "amqp://h:5672", "amqp://u1:xxxxx@h:5672"},
		{"options only", "amqp://h", &ClientOptions{Username: "u2", Password: "p2"}, true, "u2", "p2", "amqp://h", "amqp://h"},
		{"none", "amqp://h:5672", nil, false, "", "", "amqp://h:5672", "amqp://h:5672"},
		{"user without password", "amqp://u1@h:5672/", nil, true, "u1", "", "amqp://h:5672/", "amqp://u1@h:5672/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []string{tc.url}, tc.opts, nil)
			require.NoError(t, h.dial())
			b := h.fb.dials[0]
			assert.Equal(t, tc.plain, b.plain)
			assert.Equal(t, tc.user, b.user)
			assert.Equal(t, tc.pass, b.pass)
			assert.Equal(t, tc.wantAddr, b.addr)
			assert.Equal(t, tc.wantShown, b.shown)
			assert.Nil(t, b.opts.SASLType, "SASL is set by the dialer from the credentials, not inherited")
		})
	}
}

func TestDialPassesTLSAndBaseOptions(t *testing.T) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	base := &amqp.ConnOptions{ContainerID: "orders-svc", IdleTimeout: 10 * time.Second}
	h := newHarness(t, []string{"amqps://u:p@a.example", "amqps://b.example:5671"},
		&ClientOptions{TLSConfig: cfg, ConnOptions: base}, func(fb *fakeBroker) {
			fb.dialErr = func(n int, _ *broker) error {
				if n == 1 {
					return refused
				}
				return nil
			}
		})
	require.NoError(t, h.dial())
	require.Len(t, h.fb.dials, 2)
	for _, b := range h.fb.dials {
		assert.Same(t, cfg, b.opts.TLSConfig)
		assert.Equal(t, "orders-svc", b.opts.ContainerID)
		assert.Equal(t, 10*time.Second, b.opts.IdleTimeout)
	}
	assert.Equal(t, "amqps://a.example", h.fb.dials[0].addr)
}

func TestDialRejectsBadConfiguration(t *testing.T) {
	bad := &Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}
	cases := []struct {
		name string
		urls []string
		opts *ClientOptions
	}{
		{"no URL", nil, nil},
		{"not a URL", []string{"amqp://babel:" + secret + "@host:99x"}, nil},
		{"control character", []string{"amqp://babel:" + secret + "@host\x7f:5672"}, nil},
		{"wrong scheme", []string{"http://babel:" + secret + "@host:5672"}, nil},
		{"no host", []string{"amqp://babel:" + secret + "@:5672"}, nil},
		{"no scheme", []string{"host:5672"}, nil},
		{"negative dial timeout", []string{"amqp://host"}, &ClientOptions{DialTimeout: -time.Second}},
		{"bad backoff", []string{"amqp://host"}, &ClientOptions{Backoff: bad}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(context.Background(), tc.urls, tc.opts)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			for _, text := range allTexts(err) {
				assert.NotContains(t, text, secret)
			}
		})
	}
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

func TestDialHonoursTheCallersContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := newHarness(t, []string{"amqp://a:5672", "amqp://b:5672"}, nil, func(fb *fakeBroker) {
		fb.block = func(ctx context.Context, _ *broker) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		}
	})
	_, err := h.c.connection(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrConnect)
	assert.Len(t, h.fb.dialed(), 1, "a cancelled dial does not go on to the next URL")
}

func TestReconnectStartsWithTheURLAfterTheLostOne(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672", "amqp://backup:5672"}, nil, nil)
	require.NoError(t, h.dial())
	h.fb.conn(0).kill(&amqp.ConnError{})
	h.ev.wait(t, EventDisconnected)

	cn, err := h.c.connection(context.Background())
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
	h.c.joined = func() { joined <- struct{}{} }
	require.NoError(t, h.dial())
	h.fb.conn(0).kill(nil)

	var wg sync.WaitGroup
	conns := make(chan *connection, callers)
	for range callers {
		wg.Go(func() {
			cn, err := h.c.connection(context.Background())
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

func TestCloseEndsTheClient(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	require.NoError(t, h.c.Close())
	assert.True(t, h.fb.conn(0).dead())
	_, err := h.c.connection(context.Background())
	assert.ErrorIs(t, err, ErrClosed)
	require.NoError(t, h.c.Close(), "Close is idempotent")
	for _, ev := range h.ev.list() {
		assert.NotEqual(t, EventDisconnected, ev.Kind, "a deliberate close is not a loss")
	}
}

func TestEventCallbackPanicIsContained(t *testing.T) {
	fb := newFakeBroker(t)
	var buf syncBuffer
	c, err := newClient([]string{"amqp://babel:" + secret + "@live:5672"}, &ClientOptions{
		OnEvent: func(ev ConnectionEvent) { panic("callback saw " + ev.URL + " " + secret) },
		Logger:  slog.New(slog.NewTextHandler(&buf, nil)),
	}, fb.dial)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.connection(context.Background())
	require.NoError(t, err)
	assert.Contains(t, buf.String(), "callback panicked")
	assert.NotContains(t, buf.String(), secret)
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		err            error
		link, conn     bool
		mayBeStoredErr bool
	}{
		{&amqp.LinkError{}, true, false, true},
		{fmt.Errorf("wrapped: %w", &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}}), true, false, true},
		{&amqp.SessionError{}, true, true, true},
		{&amqp.ConnError{}, true, true, true},
		{refused, true, true, true},
		{net.ErrClosed, true, true, true},
		{context.Canceled, false, false, true},
		{context.DeadlineExceeded, false, false, true},
		{&amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded"}, false, false, false},
		{&OutcomeError{State: &amqp.StateRejected{}}, false, false, false},
		{errors.New("encode: message too large"), false, false, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%T %v", tc.err, tc.err), func(t *testing.T) {
			assert.Equal(t, tc.link, linkLost(tc.err), "linkLost")
			assert.Equal(t, tc.conn, connectionLost(tc.err), "connectionLost")
			assert.Equal(t, tc.mayBeStoredErr, mayBeStored(tc.err), "mayBeStored")
		})
	}
}

func TestEventKindNames(t *testing.T) {
	seen := map[string]bool{}
	for k := EventConnected; k <= EventPublishRetried; k++ {
		name := k.String()
		assert.NotContains(t, name, "ConnectionEventKind")
		assert.False(t, seen[name], "duplicate name %s", name)
		seen[name] = true
	}
	assert.Equal(t, "ConnectionEventKind(99)", ConnectionEventKind(99).String())
}
