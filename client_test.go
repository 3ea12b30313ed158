package artemis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fakes below stand in for go-amqp behind the Client's dial seam: a
// fakeBroker hands out fakeConns, each its own session, whose links are
// fakelink links that fail as go-amqp's do when their connection dies.

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

func TestDialHonoursTheCallersContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := newHarness(t, []string{"amqp://a:5672", "amqp://b:5672"}, nil, func(fb *fakeBroker) {
		fb.block = func(ctx context.Context, _ *broker) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		}
	})
	_, err := h.b.connection(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrConnect)
	assert.Len(t, h.fb.dialed(), 1, "a cancelled dial does not go on to the next URL")
}

func TestCloseEndsTheClient(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	require.NoError(t, h.c.Close(context.Background()))
	assert.True(t, h.fb.conn(0).dead())
	_, err := h.b.connection(context.Background())
	assert.ErrorIs(t, err, ErrClosed)
	require.NoError(t, h.c.Close(context.Background()), "Close is idempotent")
	for _, ev := range h.ev.list() {
		assert.NotEqual(t, EventDisconnected, ev.Kind, "a deliberate close is not a loss")
	}
}

func TestCloseCutsADialInFlightShort(t *testing.T) {
	dialing := make(chan struct{}, 4)
	h := newHarness(t, []string{"amqp://live:5672"}, &ClientOptions{DialTimeout: time.Minute}, func(fb *fakeBroker) {
		fb.block = func(ctx context.Context, _ *broker) error {
			if fb.connCount() > 0 {
				dialing <- struct{}{}
				<-ctx.Done() // a host that never answers, for a minute
				return ctx.Err()
			}
			return nil
		}
	})
	joined := make(chan struct{}, 4)
	h.b.joined = func() { joined <- struct{}{} }
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	run := startConsume(h, "orders", mustConsumer(t, Handlers{urnCreated: newHandled().handler(nil)}))
	h.ev.wait(t, EventConsumerAttached)

	h.fb.conn(0).kill(&amqp.ConnError{})
	published := make(chan error, 1)
	go func() {
		_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
		published <- err
	}()
	select {
	case <-dialing:
	case <-time.After(5 * time.Second):
		t.Fatal("no re-dial started")
	}
	select {
	case <-joined: // the consumer and the publisher both wait on the one dial
	case <-time.After(5 * time.Second):
		t.Fatal("the dial was not shared")
	}

	start := time.Now()
	require.NoError(t, h.c.Close(context.Background()))
	assert.Less(t, time.Since(start), time.Second, "Close waits for no dial")
	assert.ErrorIs(t, run.wait(t), ErrClosed, "Consume returns ErrClosed")
	select {
	case err := <-published:
		assert.ErrorIs(t, err, ErrClosed)
		assert.ErrorIs(t, err, ErrConnect)
	case <-time.After(5 * time.Second):
		t.Fatal("the publish waiting on the dial outlived Close")
	}
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Len(t, h.fb.dialed(), 2, "one shared re-dial, cut short")
}

func TestClientPublisherObserverHearsItsPublishes(t *testing.T) {
	obs, own := &observed{}, &observed{}
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	p, err := h.c.Publisher(context.Background(), "orders", WithObserver(obs))
	require.NoError(t, err)
	id, err := p.Publish(context.Background(), Job(urnCreated, orderData))
	require.NoError(t, err)
	require.Len(t, obs.publishes(), 1)
	ev := obs.publishes()[0]
	assert.Equal(t, PublishEvent{Queue: "orders", URN: urnCreated, MessageID: id, Outcome: PublishAccepted, Duration: ev.Duration}, ev)

	// A publish's own observer replaces the publisher's.
	_, err = p.Publish(context.Background(), Job(urnCreated, orderData), WithObserver(own))
	require.NoError(t, err)
	assert.Len(t, obs.publishes(), 1)
	require.Len(t, own.publishes(), 1)
	assert.Equal(t, "orders", own.publishes()[0].Queue)
}

// Close's ctx bounds the wait for a close handshake that hangs: Close
// returns ctx's error when it ends, and the Client is closed all the same.
func TestClientCloseIsBoundedByItsContext(t *testing.T) {
	h := slowCloseHarness(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := h.c.Close(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second, "not held by the hanging close")
	_, err = h.c.Publisher(context.Background(), "orders")
	assert.ErrorIs(t, err, ErrClosed, "closed although the close handshake hangs")
}

// Without a hang, Close returns the close's own result, and a second Close
// has nothing to do.
func TestClientCloseReturnsWhenClosed(t *testing.T) {
	h := newHarness(t, []string{"amqp://live:5672"}, nil, nil)
	require.NoError(t, h.dial())
	require.NoError(t, h.c.Close(context.Background()))
	require.NoError(t, h.c.Close(context.Background()))
	_, err := h.c.Publisher(context.Background(), "orders")
	assert.ErrorIs(t, err, ErrClosed)
}

// A Close whose ctx is done already returns ctx's error at once, hanging
// handshake or not, and the Client is closed before it returns: a later
// Publisher, Consume or Subscribe fails with ErrClosed, a second Close has
// nothing to do.
func TestClientCloseWithADoneContextClosesAtOnce(t *testing.T) {
	for _, hangs := range []bool{true, false} {
		t.Run(fmt.Sprintf("close hangs %v", hangs), func(t *testing.T) {
			var h *harness
			if hangs {
				h = slowCloseHarness(t, nil)
			} else {
				h = newHarness(t, []string{"amqp://live:5672"}, nil, nil)
				require.NoError(t, h.dial())
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			start := time.Now()
			require.ErrorIs(t, h.c.Close(ctx), context.Canceled)
			assert.Less(t, time.Since(start), 5*time.Second, "not held by the close")
			assertClientClosed(t, h.c)
			require.NoError(t, h.c.Close(context.Background()), "closed already: nothing to wait for")
		})
	}
}

// assertClientClosed checks that every call that opens something on c
// fails with ErrClosed.
func assertClientClosed(t *testing.T, c *Client) {
	t.Helper()
	_, err := c.Publisher(context.Background(), "orders")
	assert.ErrorIs(t, err, ErrClosed, "Publisher")
	_, err = c.TopicPublisher(context.Background(), "events")
	assert.ErrorIs(t, err, ErrClosed, "TopicPublisher")
	cons := mustConsumer(t, Handlers{urnCreated: succeeding})
	assert.ErrorIs(t, c.Consume(context.Background(), "orders", cons), ErrClosed, "Consume")
	assert.ErrorIs(t, c.Subscribe(context.Background(), "events", "audit", cons), ErrClosed, "Subscribe")
}
