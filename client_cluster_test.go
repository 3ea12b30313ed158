package artemis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// clusterHarness is a cluster Client over one fake broker that answers for
// the members n1, n2, ... (amqp://nI:5672); a member marked down refuses
// every dial.
type clusterHarness struct {
	t  *testing.T
	fb *fakeBroker
	ev *events
	c  *Client        // the user's Client
	cl *clusterClient // its backend

	mu   sync.Mutex
	down map[string]bool
}

// dialedClusterPublisher is a harness of n members, all dialed, and a
// publisher on "orders".
func dialedClusterPublisher(t *testing.T, n int, opts *ClientOptions) (*clusterHarness, *ClientPublisher) {
	t.Helper()
	h := newClusterHarness(t, n, opts, nil)
	require.NoError(t, h.cl.dialMembers(context.Background()))
	p, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	return h, p
}

func newClusterHarness(t *testing.T, n int, opts *ClientOptions, prepare func(*fakeBroker)) *clusterHarness {
	t.Helper()
	return newClusterHarnessDialling(t, n, opts, prepare, nil)
}

// newClusterHarnessDialling is newClusterHarness whose connections are
// wrap's (nil: the fake broker's own).
func newClusterHarnessDialling(t *testing.T, n int, opts *ClientOptions, prepare func(*fakeBroker), wrap func(dialFunc) dialFunc) *clusterHarness {
	t.Helper()
	h := &clusterHarness{t: t, fb: newFakeBroker(t), ev: newEvents(), down: map[string]bool{}}
	h.fb.dialErr = func(_ int, b *broker) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.down[b.addr] {
			return refused
		}
		return nil
	}
	if prepare != nil {
		prepare(h.fb)
	}
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	o.OnEvent = h.ev.on
	o.Backoff = &Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Multiplier: 2}
	nodes := make([][]string, n)
	for i := range nodes {
		nodes[i] = []string{memberURL(i)}
	}
	dial := dialFunc(h.fb.dial)
	if wrap != nil {
		dial = wrap(dial)
	}
	cl, err := newCluster(nodes, &o, dial)
	require.NoError(t, err)
	c := clientOver(cl)
	h.cl, h.c = cl, c
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return h
}

func memberURL(i int) string { return fmt.Sprintf("amqp://n%d:5672", i+1) }

func (h *clusterHarness) setDown(i int, down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down[memberURL(i)] = down
}

// keptBy counts the transfers to addr that member i's connections accepted.
func (h *clusterHarness) keptBy(i int, addr string) int {
	n := 0
	for k := range h.fb.connCount() {
		c := h.fb.conn(k)
		if c.addr != memberURL(i) {
			continue
		}
		for _, s := range c.sendersTo(addr) {
			n += len(s.Kept())
		}
	}
	return n
}

// connOf is member i's newest connection.
func (h *clusterHarness) connOf(i int) *fakeConn {
	var last *fakeConn
	for k := range h.fb.connCount() {
		if c := h.fb.conn(k); c.addr == memberURL(i) {
			last = c
		}
	}
	require.NotNil(h.t, last, "member %d was never connected", i+1)
	return last
}

func TestDialClusterRefusesABadMemberList(t *testing.T) {
	for name, nodes := range map[string][][]string{
		"no member":          nil,
		"a member without":   {{"amqp://n1:5672"}, {}},
		"a URL that is bad":  {{"amqp://n1:5672"}, {"http://n2"}},
		"a blank member URL": {{""}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DialCluster(context.Background(), nodes, nil)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}

func TestDialClusterSucceedsWithOneMemberUpAndFailsWithNone(t *testing.T) {
	h := newClusterHarness(t, 3, &ClientOptions{Password: secret}, nil)
	h.setDown(0, true)
	h.setDown(2, true)
	require.NoError(t, h.cl.dialMembers(context.Background()))
	st := h.c.Status()
	assert.True(t, st.Connected)
	require.Len(t, st.Members, 3)
	assert.False(t, st.Members[0].Connected)
	assert.True(t, st.Members[1].Connected)
	assert.Equal(t, memberURL(1), st.URL)
	assert.False(t, st.Members[2].Connected)

	none := newClusterHarness(t, 2, &ClientOptions{Password: secret}, nil)
	none.setDown(0, true)
	none.setDown(1, true)
	err := none.cl.dialMembers(context.Background())
	assert.ErrorIs(t, err, ErrConnect)
	assert.Contains(t, err.Error(), "member 1")
	assert.Contains(t, err.Error(), "member 2")
	assert.NotContains(t, err.Error(), secret)
}

func TestClusterPublishesSpreadOverTheMembers(t *testing.T) {
	h, p := dialedClusterPublisher(t, 3, nil)
	for range 30 {
		_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
		require.NoError(t, err)
	}
	for i := range 3 {
		assert.Equal(t, 10, h.keptBy(i, "orders"), "member %d", i+1)
	}
	require.NoError(t, p.Close(context.Background()))
}

func TestClusterPinsAGroupAndADuplicateIDToOneMember(t *testing.T) {
	h, p := dialedClusterPublisher(t, 3, nil)
	for range 12 {
		_, err := p.Publish(context.Background(), Job(urnCreated, orderData), WithGroupID("customer-7"))
		require.NoError(t, err)
	}
	want := memberOf("customer-7", 3)
	assert.Equal(t, 12, h.keptBy(want, "orders"), "every message of the group on member %d", want+1)

	env, err := NewEnvelope(urnCreated, orderData)
	require.NoError(t, err)
	for range 2 { // the caller's own retry of the same envelope
		_, err := p.Publish(context.Background(), env, WithDuplicateDetection())
		require.NoError(t, err)
	}
	dup := memberOf(env.Meta.ID, 3)
	got := 0
	for k := range h.fb.connCount() {
		c := h.fb.conn(k)
		for _, s := range c.sendersTo("orders") {
			for _, m := range s.Kept() {
				if m.Properties.MessageID == env.Meta.ID {
					assert.Equal(t, memberURL(dup), c.addr, "the duplicate id's member")
					got++
				}
			}
		}
	}
	assert.Equal(t, 2, got)

	groups := map[int]bool{}
	for g := range 60 {
		groups[memberOf(fmt.Sprintf("group-%d", g), 3)] = true
	}
	assert.Len(t, groups, 3, "groups hash to every member")
}

func TestClusterKeyedPublishWaitsForItsMember(t *testing.T) {
	h, p := dialedClusterPublisher(t, 3, nil)
	own := memberOf("g", 3)
	h.setDown(own, true)
	h.connOf(own).kill(&amqp.ConnError{})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.Publish(ctx, Job(urnCreated, orderData), WithGroupID("g"))
	assert.ErrorIs(t, err, ErrConnect, "waited for its member until ctx ended")
	for i := range 3 {
		assert.Zero(t, h.keptBy(i, "orders"), "member %d: nothing went elsewhere", i+1)
	}

	h.setDown(own, false)
	_, err = p.Publish(context.Background(), Job(urnCreated, orderData), WithGroupID("g"))
	require.NoError(t, err)
	assert.Equal(t, 1, h.keptBy(own, "orders"), "on its member once it is back")
}

func TestClusterFailoverSendsAKeyedPublishToTheNextMember(t *testing.T) {
	h, p := dialedClusterPublisher(t, 3, &ClientOptions{ClusterFailover: true})
	own := memberOf("g", 3)
	h.setDown(own, true)
	h.connOf(own).kill(&amqp.ConnError{})

	_, err := p.Publish(context.Background(), Job(urnCreated, orderData), WithGroupID("g"))
	require.NoError(t, err)
	assert.Equal(t, 1, h.keptBy((own+1)%3, "orders"), "the next member took it")
}

func TestClusterUnkeyedPublishesSkipAMemberThatIsDown(t *testing.T) {
	h, p := dialedClusterPublisher(t, 3, nil)
	h.setDown(1, true)
	h.connOf(1).kill(&amqp.ConnError{})
	require.Eventually(t, func() bool { return !h.c.Status().Members[1].Connected }, 5*time.Second, time.Millisecond)

	for range 20 {
		_, err := p.Publish(context.Background(), Job(urnCreated, orderData))
		require.NoError(t, err)
	}
	assert.Zero(t, h.keptBy(1, "orders"))
	assert.Equal(t, 20, h.keptBy(0, "orders")+h.keptBy(2, "orders"))
	assert.InDelta(t, 10, h.keptBy(0, "orders"), 1)
}

func TestClusterReceiptPipelinesOnTheKeyedMember(t *testing.T) {
	h, p := dialedClusterPublisher(t, 2, nil)
	r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, orderData), WithGroupID("g"))
	require.NoError(t, err)
	require.NoError(t, r.Wait(context.Background()))
	assert.Equal(t, 1, h.keptBy(memberOf("g", 2), "orders"))
}

func TestClusterConsumesFromEveryMemberAndReattachesALostOne(t *testing.T) {
	attached := make(chan *fakelink.Receiver, 16)
	var mu sync.Mutex
	sent := map[string]int{}
	h := newClusterHarness(t, 3, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			c.attached = attached
			mu.Lock()
			sent[c.addr]++
			mu.Unlock()
			c.deliveries = func() []*amqp.Message { return []*amqp.Message{orderMessage(t, 0)} }
		}
	})
	require.NoError(t, h.cl.dialMembers(context.Background()))
	seen := newHandled()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- h.c.Consume(ctx, "orders", mustConsumer(t, Handlers{urnCreated: seen.handler(nil)}))
	}()

	for range 3 {
		r := attachedReceiver(t, attached)
		require.NoError(t, r.WaitSettled(context.Background(), 1))
	}
	for i := range 3 {
		assert.Len(t, h.connOf(i).receiverList(), 1, "a receiver on member %d", i+1)
	}
	for range 3 {
		seen.next(t)
	}

	h.connOf(1).kill(&amqp.ConnError{})
	r := attachedReceiver(t, attached)
	require.NoError(t, r.WaitSettled(context.Background(), 1))
	seen.next(t)
	assert.Equal(t, 2, h.fb.connCount()-3+1, "only the lost member re-dialled")
	mu.Lock()
	assert.Equal(t, 2, sent[memberURL(1)])
	assert.Equal(t, 1, sent[memberURL(0)])
	mu.Unlock()

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return")
	}
}

func TestClusterConsumeReturnsErrClosedAndCloseClosesEveryMember(t *testing.T) {
	h := newClusterHarness(t, 2, nil, nil)
	require.NoError(t, h.cl.dialMembers(context.Background()))
	done := make(chan error, 1)
	go func() {
		done <- h.c.Consume(context.Background(), "orders", mustConsumer(t, Handlers{urnCreated: succeeding}))
	}()
	require.Eventually(t, func() bool { return len(h.connOf(0).receiverList()) == 1 && len(h.connOf(1).receiverList()) == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, h.c.Close(context.Background()))
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return")
	}
	st := h.c.Status()
	assert.False(t, st.Connected)
	assert.ErrorIs(t, st.LastError, ErrClosed)
	for i, m := range st.Members {
		assert.False(t, m.Connected, "member %d", i+1)
	}
}

func TestClusterConsumeRefusesABadConsumerAtOnce(t *testing.T) {
	h := newClusterHarness(t, 2, nil, nil)
	err := h.c.Consume(context.Background(), " ", mustConsumer(t, Handlers{urnCreated: succeeding}))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	err = h.c.Consume(context.Background(), "orders", nil)
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestClusterPublisherReportsARefusalAndWaitsWhenEveryMemberIsDown(t *testing.T) {
	refusing := newClusterHarness(t, 2, nil, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			if c.addr == memberURL(1) {
				c.attachErr = func(string, bool) error {
					return &amqp.Error{Condition: amqp.ErrCondUnauthorizedAccess, Description: "not allowed"}
				}
			}
		}
	})
	require.NoError(t, refusing.cl.dialMembers(context.Background()))
	_, err := refusing.c.Publisher(context.Background(), "orders")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "member 2")
	assert.NotErrorIs(t, err, ErrConnect, "a refusal, not an outage")

	fast := newClusterHarness(t, 2, &ClientOptions{FailFast: true}, nil)
	fast.setDown(0, true)
	fast.setDown(1, true)
	_, err = fast.c.Publisher(context.Background(), "orders")
	assert.ErrorIs(t, err, ErrConnect)

	patient := newClusterHarness(t, 2, nil, nil)
	patient.setDown(0, true)
	patient.setDown(1, true)
	got := make(chan error, 1)
	go func() {
		_, err := patient.c.Publisher(context.Background(), "orders")
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Publisher returned %v with every member down", err)
	case <-time.After(50 * time.Millisecond):
	}
	patient.setDown(1, false)
	select {
	case err := <-got:
		assert.NoError(t, err, "attached once a member came back")
	case <-time.After(5 * time.Second):
		t.Fatal("Publisher did not return once a member came back")
	}
}

// A keyed publish whose connection dies after the write is retried (with
// its duplicate id) on its own member's new connection, never elsewhere.
func TestClusterRetryAfterAnUnknownOutcomeStaysOnTheMember(t *testing.T) {
	env, err := NewEnvelope(urnCreated, orderData)
	require.NoError(t, err)
	own := memberOf(env.Meta.ID, 3)
	var mu sync.Mutex
	dropped := false
	h, err := publishDroppingItsMember(t, nil, env, func(*clusterHarness) bool {
		mu.Lock()
		defer mu.Unlock()
		first := !dropped
		dropped = true
		return first
	})
	require.NoError(t, err)
	assert.Equal(t, 1, h.keptBy(own, "orders"), "stored once, on its member")
	for i := range 3 {
		if i != own {
			assert.Zero(t, h.keptBy(i, "orders"), "member %d", i+1)
		}
	}
	retried := h.ev.wait(t, EventPublishRetried)
	assert.Equal(t, memberURL(own), retried.URL)
}

// A cluster's Close whose ctx is done already returns ctx's error at once,
// though every member's close handshake hangs, with every member closed.
func TestClusterCloseWithADoneContextClosesEveryMemberAtOnce(t *testing.T) {
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	h := newClusterHarnessDialling(t, 2, nil, nil, func(dial dialFunc) dialFunc {
		return func(ctx context.Context, b *broker) (amqpConn, error) {
			cn, err := dial(ctx, b)
			if err != nil {
				return nil, err
			}
			hangClose(cn.(*fakeConn), unblock)
			return cn, nil
		}
	})
	require.NoError(t, h.cl.dialMembers(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	require.ErrorIs(t, h.c.Close(ctx), context.Canceled)
	assert.Less(t, time.Since(start), 5*time.Second, "not held by the members' closes")
	assertClientClosed(t, h.c)
	for i, m := range h.c.Status().Members {
		assert.False(t, m.Connected, "member %d", i+1)
	}
}

// A keyed publish whose connection dies after the write, and whose member
// cannot be re-dialled for the resend, has an unknown outcome: it is not
// an ErrConnect (nothing sent), so ClusterFailover does not send it again
// to another member, where it would be stored a second time.
func TestClusterFailoverNeverMovesAnUnknownOutcome(t *testing.T) {
	env, err := NewEnvelope(urnCreated, orderData)
	require.NoError(t, err)
	own := memberOf(env.Meta.ID, 3)
	h, err := publishDroppingItsMember(t, &ClientOptions{ClusterFailover: true}, env, func(h *clusterHarness) bool {
		h.setDown(own, true) // the member is gone: its re-dial is refused
		return true
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, ErrConnect, "the first copy may be stored: not a publish that was never sent")
	for i := range 3 {
		assert.Zero(t, h.keptBy(i, "orders"), "member %d: not sent elsewhere", i+1)
	}
}

// hangDetachConn is a fake connection whose senders' Close hangs, as a
// detach on a half-open network does, until unblock is closed or its ctx
// ends.
type hangDetachConn struct {
	*fakeConn
	unblock <-chan struct{}
}

func (c hangDetachConn) NewSession(context.Context, *amqp.SessionOptions) (amqpSession, error) {
	return c, nil
}

func (c hangDetachConn) NewSender(ctx context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	s, err := c.fakeConn.NewSender(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	return hangDetachSender{s, c.unblock}, nil
}

type hangDetachSender struct {
	linkSender
	unblock <-chan struct{}
}

func (s hangDetachSender) Close(ctx context.Context) error {
	select {
	case <-s.unblock:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.linkSender.Close(ctx)
}

// A cluster Publisher refused by one member detaches the links the others
// attached without holding its caller past ctx, though their detach hangs.
func TestClusterPublisherRefusedReturnsWithinItsContext(t *testing.T) {
	unblock := make(chan struct{})
	t.Cleanup(func() { close(unblock) })
	h := newClusterHarnessDialling(t, 2, &ClientOptions{DialTimeout: 10 * time.Second}, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			if c.addr == memberURL(1) {
				c.attachErr = func(string, bool) error {
					return &amqp.Error{Condition: amqp.ErrCondUnauthorizedAccess, Description: "not allowed"}
				}
			}
		}
	}, func(dial dialFunc) dialFunc {
		return func(ctx context.Context, b *broker) (amqpConn, error) {
			cn, err := dial(ctx, b)
			if err != nil {
				return nil, err
			}
			return hangDetachConn{cn.(*fakeConn), unblock}, nil
		}
	})
	require.NoError(t, h.cl.dialMembers(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := h.c.Publisher(ctx, "orders")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not allowed")
	assert.Less(t, time.Since(start), 2*time.Second, "not held past ctx by the detach")
}

// publishDroppingItsMember publishes env with duplicate detection through
// a cluster of 3 whose member of env's key loses, during its transfers,
// each new connection drop approves as it is set up (drop may change h).
func publishDroppingItsMember(t *testing.T, opts *ClientOptions, env *Envelope, drop func(h *clusterHarness) bool) (*clusterHarness, error) {
	t.Helper()
	own := memberOf(env.Meta.ID, 3)
	var h *clusterHarness
	h = newClusterHarness(t, 3, opts, func(fb *fakeBroker) {
		fb.setup = func(c *fakeConn) {
			if c.addr != memberURL(own) || !drop(h) {
				return
			}
			c.outcome = func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
				c.kill(&amqp.ConnError{})
				return nil, &amqp.ConnError{}
			}
		}
	})
	require.NoError(t, h.cl.dialMembers(context.Background()))
	p, err := h.c.Publisher(context.Background(), "orders", WithDuplicateDetection())
	require.NoError(t, err)
	_, err = p.Publish(context.Background(), env)
	return h, err
}

// route moves a publish on to the next member only when nothing was sent:
// an error that says both "could not connect" (ErrConnect) and "the outcome
// is unknown" (ErrOutcomeUnknown: the copy may be stored) stays with its
// member, keyed with ClusterFailover or unkeyed, so a copy is never written
// twice without duplicate detection.
func TestClusterRouteNeverMovesAnUnknownOutcomeThatAlsoSaysConnect(t *testing.T) {
	group := "g"
	for _, tc := range []struct {
		name string
		msg  *amqp.Message
	}{
		{"unkeyed", &amqp.Message{}},
		{"keyed, with ClusterFailover", &amqp.Message{Properties: &amqp.MessageProperties{GroupID: &group}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newClusterHarness(t, 3, &ClientOptions{ClusterFailover: true}, nil)
			s := &clusterSender{c: h.cl, addr: "orders"}
			for _, m := range h.cl.members {
				s.members = append(s.members, m.newSender("orders"))
			}
			unknownAndConnect := fmt.Errorf("%w (%w)", ErrOutcomeUnknown, ErrConnect)
			var tried []*clientSender
			_, err := route(context.Background(), s, tc.msg, func(m *clientSender, _ bool) (bool, error) {
				tried = append(tried, m)
				if len(tried) == 1 {
					return false, unknownAndConnect
				}
				return false, nil
			})
			assert.ErrorIs(t, err, ErrOutcomeUnknown)
			assert.Len(t, tried, 1, "not re-sent to another member")

			// The same error without ErrOutcomeUnknown moves on.
			tried = nil
			_, err = route(context.Background(), s, tc.msg, func(m *clientSender, _ bool) (bool, error) {
				tried = append(tried, m)
				if len(tried) == 1 {
					return false, fmt.Errorf("dial: %w", ErrConnect)
				}
				return false, nil
			})
			assert.NoError(t, err)
			assert.Len(t, tried, 2, "a member that could not be connected to is skipped")
		})
	}
}
