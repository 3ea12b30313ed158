package artemis

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// receiptConn is a fakeConn whose senders pipeline, as go-amqp's do: a
// transfer is written at once and its outcome comes later, given by the
// test, or fails when the connection dies.
type receiptConn struct{ *fakeConn }

func (c receiptConn) NewSession(context.Context, *amqp.SessionOptions) (amqpSession, error) {
	return c, nil
}

func (c receiptConn) NewSender(ctx context.Context, target string, opts *amqp.SenderOptions) (linkSender, error) {
	ls, err := c.fakeConn.NewSender(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	return &receiptLink{Sender: ls.(*fakelink.Sender), conn: c.fakeConn, outcomes: receiptOutcomes(c.fakeConn)}, nil
}

// The outcomes the test gives, by connection and message-id; a message
// sent twice (a retry) waits on the same channel again.
var (
	outcomesMu sync.Mutex
	outcomesOf = map[*fakeConn]*outcomeBook{}
)

type outcomeBook struct {
	outcomeChannels // its mu guards written too
	written         []string
}

func receiptOutcomes(c *fakeConn) *outcomeBook {
	outcomesMu.Lock()
	defer outcomesMu.Unlock()
	b, ok := outcomesOf[c]
	if !ok {
		b = &outcomeBook{}
		outcomesOf[c] = b
	}
	return b
}

func (b *outcomeBook) ids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.written...)
}

type receiptLink struct {
	*fakelink.Sender
	conn     *fakeConn
	outcomes *outcomeBook
}

func (l *receiptLink) startOutcome(_ context.Context, msg *amqp.Message) (pendingTransfer, error) {
	if l.conn.dead() {
		return pendingTransfer{}, &amqp.ConnError{}
	}
	if l.Closed() {
		return pendingTransfer{}, &amqp.LinkError{} // detached: go-amqp fails the send at once
	}
	id := msg.Properties.MessageID.(string)
	l.outcomes.mu.Lock()
	l.outcomes.written = append(l.outcomes.written, id)
	l.outcomes.mu.Unlock()
	ch := l.outcomes.channel(id)
	done := l.conn.done
	return pendingTransfer{later: func(ctx context.Context) (amqp.DeliveryState, error) {
		select {
		case o := <-ch:
			return o.state, o.err
		case <-done:
			return nil, &amqp.ConnError{}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}, nil
}

// receiptHarness is newHarness with pipelining links.
func receiptHarness(t *testing.T) *harness {
	t.Helper()
	return receiptHarnessWith(t, ClientOptions{}, "amqp://live:5672")
}

// receiptHarnessWith is receiptHarness with options and URLs.
func receiptHarnessWith(t *testing.T, o ClientOptions, urls ...string) *harness {
	t.Helper()
	return harnessOver(t, o, func(c *fakeConn) amqpConn { return receiptConn{c} }, urls...)
}

// harnessOver is newHarness with options and URLs whose connections are
// the fake broker's, as over makes them (o's OnEvent hears the events too).
func harnessOver(t *testing.T, o ClientOptions, over func(*fakeConn) amqpConn, urls ...string) *harness {
	t.Helper()
	h := newHarness(t, urls, nil, nil)
	if user := o.OnEvent; user != nil {
		o.OnEvent = func(ev ConnectionEvent) { h.ev.on(ev); user(ev) }
	} else {
		o.OnEvent = h.ev.on
	}
	bc, err := newClient(urls, &o, func(ctx context.Context, b *broker) (amqpConn, error) {
		cn, err := h.fb.dial(ctx, b)
		if err != nil {
			return nil, err
		}
		return over(cn.(*fakeConn)), nil
	})
	require.NoError(t, err)
	bc.random = func() float64 { return 0.5 }
	bc.after = h.timers.after
	c := clientOver(bc)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	h.b, h.c = bc, c
	return h
}

func TestClientPublisherReceiptsPipeline(t *testing.T) {
	h := receiptHarness(t)
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	book := receiptOutcomes(h.fb.conn(0))
	var rs []*Receipt
	for range 5 {
		r, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil), WithTTL(1000), WithGroupID("g"))
		require.NoError(t, err)
		rs = append(rs, r)
	}
	require.Len(t, book.ids(), 5, "all five written before any outcome")
	for i := len(rs) - 1; i >= 0; i-- {
		if i == 2 {
			book.channel(rs[i].ID()) <- outcomeOf{state: &amqp.StateRejected{}}
			continue
		}
		book.channel(rs[i].ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	}
	for i, r := range rs {
		if i == 2 {
			assert.ErrorIs(t, r.Wait(context.Background()), ErrNotAccepted)
			continue
		}
		assert.NoError(t, r.Wait(context.Background()))
	}
}

// publishReceipts publishes n messages with receipts on pub.
func publishReceipts(t *testing.T, pub *ClientPublisher, n int) []*Receipt {
	t.Helper()
	var rs []*Receipt
	for range n {
		r, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
		require.NoError(t, err)
		rs = append(rs, r)
	}
	return rs
}

// Receipts outstanding when the connection drops: unknown without
// duplicate detection, nothing resent.
func TestClientPublisherReceiptsOfALostConnectionAreUnknown(t *testing.T) {
	h := receiptHarness(t)
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	rs := publishReceipts(t, pub, 3)
	h.fb.conn(0).kill(&amqp.ConnError{})
	for _, r := range rs {
		err := r.Wait(context.Background())
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		assert.NotErrorIs(t, err, ErrNotAccepted)
	}
	assert.Equal(t, 1, h.fb.connCount(), "nothing re-dialed: nothing to resend")
	assert.NotContains(t, h.ev.kinds(), EventPublishRetried)

	// The next publish re-dials.
	r, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	receiptOutcomes(h.fb.conn(1)).channel(r.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	require.NoError(t, r.Wait(context.Background()))
}

// With WithDuplicateDetection, each outstanding receipt's message is sent
// once more on the re-dialed link, and the receipt resolves as accepted when
// that copy is; a resend refused or lost too leaves it unknown.
func TestClientPublisherReceiptsAreResentOnceWithDuplicateDetection(t *testing.T) {
	h := receiptHarness(t)
	var answers sync.Map // meta.id -> the resend's outcome
	h.fb.setup = func(c *fakeConn) {
		c.outcome = func(_ context.Context, m *amqp.Message) (amqp.DeliveryState, error) {
			a, ok := answers.Load(m.Properties.MessageID)
			if !ok {
				return nil, errors.New("unexpected resend")
			}
			o := a.(outcomeOf)
			return o.state, o.err
		}
	}
	pub, err := h.c.Publisher(context.Background(), "orders", WithDuplicateDetection())
	require.NoError(t, err)
	rs := publishReceipts(t, pub, 3)
	answers.Store(rs[0].ID(), outcomeOf{state: &amqp.StateAccepted{}})
	answers.Store(rs[1].ID(), outcomeOf{state: &amqp.StateReleased{}})
	answers.Store(rs[2].ID(), outcomeOf{err: &amqp.ConnError{}})
	first := receiptOutcomes(h.fb.conn(0))
	h.fb.conn(0).kill(&amqp.ConnError{})

	require.NoError(t, rs[0].Wait(context.Background()), "the resend was accepted")
	released := rs[1].Wait(context.Background())
	assert.ErrorIs(t, released, ErrOutcomeUnknown, "the resend was refused, but the first copy may be stored")
	assert.NotErrorIs(t, released, ErrNotAccepted)
	assert.ErrorIs(t, rs[2].Wait(context.Background()), ErrOutcomeUnknown, "a resend lost too")

	assert.Equal(t, []string{rs[0].ID(), rs[1].ID(), rs[2].ID()}, first.ids(), "written once on the first link")
	var resent []string
	for i := 1; i < h.fb.connCount(); i++ {
		for _, s := range h.fb.conn(i).sendersTo("orders") {
			for _, m := range s.Sent() {
				resent = append(resent, m.Properties.MessageID.(string))
				assert.Equal(t, m.Properties.MessageID, m.ApplicationProperties[PropDuplicateID], "the same duplicate id")
			}
		}
	}
	assert.Equal(t, []string{rs[0].ID(), rs[1].ID(), rs[2].ID()}, resent, "each resent once, in order")
	retried := 0
	for _, k := range h.ev.kinds() {
		if k == EventPublishRetried {
			retried++
		}
	}
	assert.Equal(t, 3, retried)
}

// A link detached under PublishWithReceipt is given up at once: the
// receipt of the transfer that found it dead resolves as a lost outcome,
// while the publishes after it re-attach and are written, even before the
// resolver reaches that receipt.
func TestClientPublisherReceiptOnADetachedLinkReattachesAtOnce(t *testing.T) {
	h := receiptHarness(t)
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	book := receiptOutcomes(h.fb.conn(0))
	r1, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil)) // holds the resolver
	require.NoError(t, err)
	senders := h.fb.conn(0).sendersTo("orders")
	require.Len(t, senders, 1)
	require.NoError(t, senders[0].Close(context.Background())) // the broker detaches the link

	r2, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	r3, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	assert.Equal(t, []string{r1.ID(), r3.ID()}, book.ids(), "r3 was written, on a new link")
	assert.Len(t, h.fb.conn(0).sendersTo("orders"), 2)
	assert.Equal(t, 1, h.fb.connCount(), "a detached link does not cost the connection")

	book.channel(r1.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	book.channel(r3.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	require.NoError(t, r1.Wait(context.Background()))
	assert.ErrorIs(t, r2.Wait(context.Background()), ErrOutcomeUnknown, "as Publish says for a transfer cut off by a detach")
	require.NoError(t, r3.Wait(context.Background()))
}

// A broker that keeps the connection but stops settling: each receipt
// resolves as unknown within twice the DialTimeout of its write (not as a
// context error: it is no longer pending), the timeouts count toward
// OutcomeTimeouts, and the connection is taken for dead and re-dialled.
func TestClientPublisherReceiptsWithNoOutcomeTimeOut(t *testing.T) {
	const dial = 20 * time.Millisecond
	h := receiptHarnessWith(t, ClientOptions{DialTimeout: dial, OutcomeTimeouts: 3}, "amqp://live:5672", "amqp://backup:5672")
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	start := time.Now()
	rs := publishReceipts(t, pub, 3)
	for _, r := range rs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Wait(ctx)
		cancel()
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "resolved, not still pending")
		assert.Contains(t, err.Error(), "no outcome within 40ms")
	}
	assert.GreaterOrEqual(t, time.Since(start), 2*dial)
	ev := h.ev.wait(t, EventDisconnected)
	assert.Contains(t, ev.Err.Error(), "3 transfers in a row got no outcome")

	// The next publish re-dials, and its receipt resolves with the outcome.
	r, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	require.Equal(t, 2, h.fb.connCount())
	receiptOutcomes(h.fb.conn(1)).channel(r.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	require.NoError(t, r.Wait(context.Background()))
}

// An outcome that came before the resolver reached its receipt, past the
// bound (the resolver was waiting out the receipt before it), is still the
// receipt's outcome.
func TestClientPublisherReceiptOutcomeThatCameInTimeIsKept(t *testing.T) {
	h := receiptHarnessWith(t, ClientOptions{DialTimeout: time.Millisecond, OutcomeTimeouts: -1}, "amqp://live:5672")
	pub, err := h.c.Publisher(context.Background(), "orders")
	require.NoError(t, err)
	for range 10 {
		rs := publishReceipts(t, pub, 2)
		book := receiptOutcomes(h.fb.conn(h.fb.connCount() - 1))
		book.channel(rs[1].ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
		require.ErrorIs(t, rs[0].Wait(context.Background()), ErrOutcomeUnknown, "no outcome: timed out")
		require.NoError(t, rs[1].Wait(context.Background()), "its outcome had come")
	}
}

// A message with a duplicate id, from WithDuplicateDetection or from a
// header, is kept for the resend after a loss, so it is never a pooled one,
// even over a go-amqp link (where a message without one is pooled and
// recycled once written): the resend carries the same envelope.
func TestClientPublisherKeepsAMessageWithADuplicateIDForTheResend(t *testing.T) {
	for name, opt := range map[string]PublishOption{
		"WithDuplicateDetection": WithDuplicateDetection(),
		"a header":               WithHeaders(map[string]string{PropDuplicateID: "order-1042"}),
	} {
		t.Run(name, func(t *testing.T) {
			h := receiptHarness(t)
			h.fb.setup = func(c *fakeConn) {
				c.outcome = func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
					return &amqp.StateAccepted{}, nil
				}
			}
			pub, err := h.c.Publisher(context.Background(), "orders")
			require.NoError(t, err)
			senderOf(pub).cur.Load().goAMQP = true // as attach marks a go-amqp link: pooled messages in use
			// Pooled messages go round before and after, so a recycled one
			// would be overwritten.
			for range 3 {
				r, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
				require.NoError(t, err)
				receiptOutcomes(h.fb.conn(0)).channel(r.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
				require.NoError(t, r.Wait(context.Background()))
			}
			r, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil), opt)
			require.NoError(t, err)
			h.fb.conn(0).kill(&amqp.ConnError{})
			require.NoError(t, r.Wait(context.Background()), "resent once, as its duplicate id allows")
			assert.Contains(t, h.ev.kinds(), EventPublishRetried)

			var resent []*amqp.Message
			for _, s := range h.fb.conn(1).sendersTo("orders") {
				resent = append(resent, s.Sent()...)
			}
			require.Len(t, resent, 1)
			m := resent[0]
			assert.Equal(t, r.ID(), m.Properties.MessageID)
			assert.NotEmpty(t, m.ApplicationProperties[PropDuplicateID])
			body, ok := m.Value.(string)
			require.True(t, ok)
			env, err := Decode([]byte(body))
			require.NoError(t, err)
			assert.Equal(t, r.ID(), env.Meta.ID, "the resend is the envelope of the receipt")
		})
	}
}

// pipelining wraps a dial so that the connections' senders pipeline
// (receiptConn).
func pipelining(dial dialFunc) dialFunc {
	return func(ctx context.Context, b *broker) (amqpConn, error) {
		cn, err := dial(ctx, b)
		if err != nil {
			return nil, err
		}
		return receiptConn{cn.(*fakeConn)}, nil
	}
}

// groupOn is a group-id that memberOf pins to member i of n.
func groupOn(t *testing.T, i, n int) string {
	t.Helper()
	for k := range 1000 {
		if g := fmt.Sprintf("g%d", k); memberOf(g, n) == i {
			return g
		}
	}
	t.Fatalf("no group for member %d of %d", i+1, n)
	return ""
}

// A cluster publisher's receipts resolve per member: member 1 stops
// settling (its outcomes never come), member 2 settles at once. Written
// alternately, starting on the stalled member, member 2's receipts all
// resolve while member 1's are still pending; member 1's resolve only at
// their own deadline, as unknown.
func TestClusterReceiptsOfAHealthyMemberDoNotWaitForAStalledOne(t *testing.T) {
	const dialTimeout = 2 * time.Second // a receipt's deadline: twice this
	h := newClusterHarnessDialling(t, 2, &ClientOptions{DialTimeout: dialTimeout}, nil, pipelining)
	require.NoError(t, h.cl.dialMembers(context.Background()))
	var outcomes sync.Map // meta.id -> its outcome, as WithOnOutcome heard it
	p, err := h.c.Publisher(context.Background(), "orders", WithOnOutcome(func(id string, err error) { outcomes.Store(id, err) }))
	require.NoError(t, err)
	stalledGroup, healthyGroup := groupOn(t, 0, 2), groupOn(t, 1, 2)

	start := time.Now()
	var stalled, healthy []*Receipt
	for range 20 {
		r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, orderData), WithGroupID(stalledGroup))
		require.NoError(t, err)
		stalled = append(stalled, r)
		r, err = p.PublishWithReceipt(context.Background(), Job(urnCreated, orderData), WithGroupID(healthyGroup))
		require.NoError(t, err)
		healthy = append(healthy, r)
	}
	book := receiptOutcomes(h.connOf(1))
	require.Len(t, book.ids(), 20, "member 2 wrote its 20")
	for _, r := range healthy {
		book.channel(r.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	}

	// Well under the stalled member's deadline (twice dialTimeout).
	bound := dialTimeout
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	resolved := 0
	for _, r := range healthy {
		if err := r.Wait(ctx); err != nil {
			break
		}
		resolved++
	}
	took := time.Since(start)
	t.Logf("20 receipts on the healthy member: %d resolved within %v (%v), 20 on the stalled member pending", resolved, bound, took.Round(time.Millisecond))
	require.Equal(t, 20, resolved, "the healthy member's receipts waited behind the stalled member's")
	for i, r := range stalled {
		select {
		case <-r.Done():
			t.Fatalf("stalled receipt %d resolved before its deadline: %v", i, r.Wait(context.Background()))
		default:
		}
	}

	// The stalled member's receipts end at their deadline, as unknown.
	wctx, wcancel := context.WithTimeout(context.Background(), 4*dialTimeout+5*time.Second)
	defer wcancel()
	for _, r := range stalled {
		assert.ErrorIs(t, r.Wait(wctx), ErrOutcomeUnknown)
		// The callback runs just after the receipt resolved.
		var heard any
		require.Eventually(t, func() bool {
			var ok bool
			heard, ok = outcomes.Load(r.ID())
			return ok
		}, 5*time.Second, time.Millisecond, "the callback heard every outcome")
		assert.ErrorIs(t, heard.(error), ErrOutcomeUnknown)
	}
	assert.GreaterOrEqual(t, time.Since(start), 2*dialTimeout, "resolved at their deadline, not before")
}

// A lost member's receipts do not hold back another member's either, even
// while their resends (WithDuplicateDetection) wait for a member that no
// longer answers: member 1's connection dies and its re-dial hangs until
// the dial timeout (a black-holed address), member 2 settles at once.
func TestClusterReceiptsOfAHealthyMemberDoNotWaitForALostOne(t *testing.T) {
	const dialTimeout = 2 * time.Second
	var blackholed atomic.Bool
	h := newClusterHarnessDialling(t, 2, &ClientOptions{DialTimeout: dialTimeout}, func(fb *fakeBroker) {
		fb.block = func(ctx context.Context, b *broker) error {
			if b.addr == memberURL(0) && blackholed.Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}
	}, pipelining)
	require.NoError(t, h.cl.dialMembers(context.Background()))
	// The callback keeps the lost receipts nobody waits for yet out of the log.
	p, err := h.c.Publisher(context.Background(), "orders", WithDuplicateDetection(),
		WithOnOutcome(func(string, error) {}))
	require.NoError(t, err)
	lostGroup, healthyGroup := groupOn(t, 0, 2), groupOn(t, 1, 2)

	var lost, healthy []*Receipt
	for range 20 {
		r, err := p.PublishWithReceipt(context.Background(), Job(urnCreated, orderData), WithGroupID(lostGroup))
		require.NoError(t, err)
		lost = append(lost, r)
		r, err = p.PublishWithReceipt(context.Background(), Job(urnCreated, orderData), WithGroupID(healthyGroup))
		require.NoError(t, err)
		healthy = append(healthy, r)
	}
	blackholed.Store(true)
	start := time.Now()
	h.connOf(0).kill(nil)
	book := receiptOutcomes(h.connOf(1))
	for _, r := range healthy {
		book.channel(r.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	}

	bound := dialTimeout / 2 // a resend to the lost member waits out a whole dial timeout
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	resolved := 0
	for _, r := range healthy {
		if err := r.Wait(ctx); err != nil {
			break
		}
		resolved++
	}
	t.Logf("20 receipts on the healthy member: %d resolved within %v (%v) while the lost member's are resent", resolved, bound, time.Since(start).Round(time.Millisecond))
	require.Equal(t, 20, resolved, "the healthy member's receipts waited behind the lost member's resends")

	// The lost member's receipts: resent once each, and unknown when the
	// resend finds no connection.
	wctx, wcancel := context.WithTimeout(context.Background(), 20*dialTimeout)
	defer wcancel()
	for _, r := range lost {
		assert.ErrorIs(t, r.Wait(wctx), ErrOutcomeUnknown)
	}
	t.Logf("the lost member's 20 receipts resolved as unknown after %v", time.Since(start).Round(time.Millisecond))
}

// An OnEvent callback that ends the goroutine (runtime.Goexit) while a
// receipt's lost outcome is handled (here at EventPublishRetried, on the
// resolver's goroutine, before the resend) does not start that handling
// again: the receipt resolves once, as unknown, nothing is resent, and the
// link's resolver goes on resolving the receipts behind it.
func TestClientPublisherReceiptSurvivesAnOnEventThatExits(t *testing.T) {
	var exits atomic.Int32
	h := receiptHarnessWith(t, ClientOptions{OnEvent: func(ev ConnectionEvent) {
		if ev.Kind == EventPublishRetried {
			exits.Add(1)
			runtime.Goexit()
		}
	}}, "amqp://live:5672")
	h.fb.setup = func(c *fakeConn) {
		c.outcome = func(context.Context, *amqp.Message) (amqp.DeliveryState, error) {
			return &amqp.StateAccepted{}, nil
		}
	}
	pub, err := h.c.Publisher(context.Background(), "orders", WithDuplicateDetection())
	require.NoError(t, err)
	rs := publishReceipts(t, pub, 2)
	// Waited on before the loss, so their failures go to the waiter and not
	// to slog.Default, where a line written late by the resolver would land
	// in the next test's capture of it.
	ended, end := context.WithCancel(context.Background())
	end()
	for _, r := range rs {
		require.ErrorIs(t, r.Wait(ended), context.Canceled, "still pending")
	}
	h.fb.conn(0).kill(&amqp.ConnError{})

	for i, r := range rs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Wait(ctx)
		cancel()
		require.NotErrorIs(t, err, context.DeadlineExceeded, "receipt %d never resolved", i)
		assert.ErrorIs(t, err, ErrOutcomeUnknown, "receipt %d", i)
	}
	assert.Equal(t, int32(2), exits.Load(), "each receipt's loss handled once")
	for i := 1; i < h.fb.connCount(); i++ {
		for _, s := range h.fb.conn(i).sendersTo("orders") {
			assert.Empty(t, s.Sent(), "nothing resent: the handling ended before the resend")
		}
	}

	// The Client goes on publishing, with receipts resolved.
	r, err := pub.PublishWithReceipt(context.Background(), Job(urnCreated, nil))
	require.NoError(t, err)
	book := receiptOutcomes(h.fb.conn(h.fb.connCount() - 1))
	book.channel(r.ID()) <- outcomeOf{state: &amqp.StateAccepted{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, r.Wait(ctx))
}
