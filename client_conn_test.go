package artemis

import (
	"context"
	"errors"
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
