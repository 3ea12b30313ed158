package artemis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// Listen receives from r and handles each delivery until ctx ends or the
// link fails.
//
// Order and concurrency. With WithConcurrency(1) (the default) deliveries
// are handled one at a time in the order r gives them. With n > 1, up to n
// handlers run at once, and deliveries that carry the same AMQP group-id
// (properties.group-id, JMSXGroupID on Artemis) are handled one at a time
// in the order they were received: the next delivery of a group starts only
// after the previous one was settled. Deliveries of other groups, and
// deliveries without a group-id, run in parallel meanwhile: while a group's
// handler is busy, its further deliveries wait in that group's own queue
// and Listen goes on receiving for the others, as far as the receiver's
// credit allows (each waiting delivery holds a unit of it).
//
// A failed delivery of a group is settled (modified with delivery-failed)
// before the next of its group starts. Artemis puts it back at the head of
// the queue and, since the group stays on this consumer, sends it again
// ahead of every message of the queue it had not yet sent. Deliveries of
// the group that were already sent on credit (at most the credit, fewer
// the lower it is) are handled before the redelivery: a group is strictly
// ordered across failures only with a credit of 1 (and Artemis's default
// redelivery-delay of 0).
//
// Shutdown. On ctx's end Listen stops receiving, lets the handlers in
// flight finish and settle (their context is not cancelled with ctx), gives
// back every delivery it took but did not start with a plain release, and
// returns nil. A delivery Receive returned after ctx ended never reaches a
// handler; nor does one still waiting (for a worker, or behind its group)
// when a worker sees ctx's end.
//
// Link loss. When Receive fails, or a settlement fails because the link,
// its session or its connection is gone, Listen starts no further handler
// for deliveries of that link (go-amqp keeps handing out deliveries it had
// prefetched, which the broker will send again anyway), gives them back,
// waits for the handlers in flight, and returns the error, wrapped. A
// delivery held for the retry delay after a failed dead-letter write is let
// go at once (its release fails on the dead link: the broker sends it
// again). The deliveries a handler sees twice after a cut are at most those
// that were in a handler at the cut.
//
// A handler that exits its goroutine (runtime.Goexit, as t.FailNow does)
// has failed its attempt: the delivery is settled as for an error, with
// ErrHandlerExited as the cause, and Listen goes on with a new goroutine.
// So does Listen when a WithOnError callback, an observer or the logger
// exits a goroutine of Listen's own; the delivery being reported is settled
// all the same. With WithConcurrency(n > 1) the workers take turns at
// receiving, and the worker that received a delivery given back on the way
// out reports it when its release fails: a callback that exits the
// goroutine there ends the receiving, and Listen returns once the handlers
// in flight settled and every worker ended.
func (c *Consumer) Listen(ctx context.Context, r Receiver) error {
	if r == nil {
		return fmt.Errorf("%w: the receiver is nil", ErrInvalidConfig)
	}
	return c.listen(ctx, r, nil)
}

// listen is Listen with the Client's hook: when link is done (nil: never),
// the receiver's link or connection is known to be dead, and listen stops
// as on a failed settlement, returning context.Cause(link), wrapped.
func (c *Consumer) listen(ctx context.Context, r Receiver, link context.Context) error { //nolint:revive // two contexts: the call's, and the connection's lost context
	if c.err != nil {
		return c.err
	}
	if c.scheduleSet && c.schedule != nil && c.retrySender == nil {
		if l := c.logTo(ctx, slog.LevelWarn); l != nil {
			logLine(ctx, l, slog.LevelWarn, "retry schedule without a retry sender: every retry is immediate",
				slog.String("queue", c.queueName(r)))
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := &listener{
		c:      c,
		r:      r,
		ctx:    ctx,
		hctx:   context.WithoutCancel(ctx),
		lost:   make(chan struct{}),
		quit:   make(chan struct{}),
		cancel: cancel,
	}
	l.onSettleErr = l.settlementFailed
	if c.limit != nil {
		l.bound = c.limit.join()
		defer l.bound.leave(ctx) // after the handlers settled
	}
	if c.concurrency > 1 {
		l.groups = make(map[string]*group) // the workers' take joins groups
	}
	if link != nil {
		l.link = link
		l.linkDone = link.Done()
		// Cuts a pending Receive short; halted sees the hook at once.
		stopHook := context.AfterFunc(link, l.linkDead)
		defer stopHook()
	}
	// quit closes on ctx's end and on a lost link. It also cuts a
	// delivery's retry hold short: a release on a dead link fails anyway,
	// and Listen would wait for it.
	stopQuit := context.AfterFunc(ctx, l.quitNow)
	defer stopQuit()
	if c.concurrency == 1 {
		// One goroutine receives and handles in turn: the queue's order,
		// and no hand-off per delivery. It is not the caller's, so a
		// handler's Goexit ends it and not Listen (serial starts another).
		res := make(chan error, 1)
		go l.serial(ctx, rctx, res)
		return <-res
	}
	// Every worker receives for itself, under the receive lock (take):
	// no goroutine hands deliveries to the workers, so a delivery wakes at
	// most the goroutine that handles it, and the deliveries join their
	// groups in the order the link gave them.
	l.rctx = rctx
	l.wg.Add(c.concurrency)
	for range c.concurrency {
		go l.worker(nil)
	}
	l.wg.Wait()
	return l.result(ctx)
}

// serial is Listen with one worker: it receives and handles in turn. When
// a handler exits the goroutine, a new serial goroutine carries on.
func (l *listener) serial(ctx, rctx context.Context, res chan<- error) {
	clean := false
	defer func() {
		if !clean {
			go l.serial(ctx, rctx, res)
		}
	}()
	err := l.receiveSerial(ctx, rctx)
	clean = true
	res <- err
}

// receiveOne receives the next delivery, for the serial loop or a worker's
// take. When the receiving is to stop (Receive failed, or the delivery came
// after the handlers were halted and was given back) ok is false and err is
// Listen's result.
func (l *listener) receiveOne(ctx, rctx context.Context) (msg *amqp.Message, ok bool, err error) {
	msg, err = l.bound.receive(rctx, l.r)
	if err != nil {
		return nil, false, l.receiveFailed(ctx, err)
	}
	if msg == nil { // the Consume's limit is reached
		return nil, false, l.result(ctx)
	}
	if l.halted() {
		l.c.giveBack(l.hctx, l.r, msg)
		return nil, false, l.result(ctx)
	}
	return msg, true, nil
}

func (l *listener) receiveSerial(ctx, rctx context.Context) error {
	for {
		msg, ok, err := l.receiveOne(ctx, rctx)
		if !ok {
			return err
		}
		_ = l.c.handle(l.hctx, l.quit, l.r, msg, l.onSettleErr)
	}
}

// listener is one run of Listen: its workers, the receive lock they take
// turns at, and the per-group queues.
type listener struct {
	c           *Consumer
	r           Receiver
	ctx         context.Context // Listen's
	hctx        context.Context // the handlers' context: Listen's, never cancelled
	link        context.Context // the Client's hook, or nil
	linkDone    <-chan struct{} // link.Done(), nil without the hook
	rctx        context.Context // the receives' context: Listen's, also cancelled when the link is lost
	wg          sync.WaitGroup
	onSettleErr func(error)
	bound       *limitListen // the Consume's limit, or nil

	lostOnce sync.Once
	halt     atomic.Bool   // set with lost, read on every delivery
	lost     chan struct{} // closed when the link is known to be gone
	lostErr  error         // why; written before lost is closed
	quitOnce sync.Once
	quit     chan struct{} // closed once ctx ended or lost closed
	cancel   context.CancelFunc

	recvMu  sync.Mutex // held by the worker that receives (take)
	stopped bool       // guarded by recvMu: the receiving is over, every worker ends

	mu     sync.Mutex
	groups map[string]*group // the busy groups, and up to maxIdleGroups idle ones
	idle   int               // idle groups in the map
	spare  []*group
}

// task is what a worker is handed: a delivery, and the group it opens (nil
// for an ungrouped delivery).
type task struct {
	msg *amqp.Message
	g   *group
}

// take receives, under the receive lock, the next delivery for a worker to
// handle, and opens its group; a delivery queued behind its group's
// delivery in flight is not returned, the worker receives again. ok is
// false once receiving is over (ctx ended, the link was lost): every worker
// then ends, after the group it opened ran dry.
func (l *listener) take() (t task, ok bool) {
	l.recvMu.Lock()
	defer l.recvMu.Unlock()
	for !l.stopped {
		// stopped first: a callback that exits the goroutine in
		// receiveOne (the report of a give-back that failed) stops the
		// receiving all the same.
		l.stopped = true
		msg, ok, _ := l.receiveOne(l.ctx, l.rctx)
		if !ok {
			return task{}, false
		}
		l.stopped = false
		t := task{msg: msg}
		if id := groupID(msg); id != "" {
			if t.g = l.join(id, msg); t.g == nil {
				continue // queued behind the delivery of its group in flight
			}
		}
		return t, true
	}
	return task{}, false
}

func (l *listener) receiveFailed(ctx context.Context, err error) error {
	select {
	case <-l.lost:
		// Receive was cut short by the loss (or failed after it).
		return l.result(ctx)
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	err = fmt.Errorf("receive: %w", err)
	l.lose(err)
	return err
}

// result is what Listen returns once the loop stopped: nil on ctx's end,
// else why the link is gone.
func (l *listener) result(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	select {
	case <-l.lost:
		return l.lostErr
	default:
		return nil
	}
}

// halted reports whether no further handler may start: ctx ended or the
// link is gone.
func (l *listener) halted() bool {
	// Flags, not the channels: many goroutines park on ctx.Done() (a
	// receiver's Receive does), and reading a channel that others lock
	// costs a cache miss on every delivery.
	if l.ctx.Err() != nil || l.halt.Load() {
		return true
	}
	if l.linkDone == nil {
		return false
	}
	select {
	case <-l.linkDone:
		l.linkDead()
		return true
	default:
		return false
	}
}

// linkDead is the Client's word that the link's connection is gone.
func (l *listener) linkDead() {
	l.lose(fmt.Errorf("link lost: %w", context.Cause(l.link)))
}

// lose records that the link is gone and cuts the pending Receive short.
func (l *listener) lose(err error) {
	l.lostOnce.Do(func() {
		l.lostErr = err
		l.halt.Store(true)
		close(l.lost)
		l.cancel()
		l.quitNow()
	})
}

func (l *listener) quitNow() { l.quitOnce.Do(func() { close(l.quit) }) }

// settlementFailed hears of every failed settlement; one that says the
// link, its session or its connection is gone stops the listener.
func (l *listener) settlementFailed(err error) {
	if linkLost(err) {
		l.lose(fmt.Errorf("link lost: settlement failed: %w", err))
	}
}

// worker handles deliveries it takes (take) until the receiving is over.
// g, when not nil, is a group whose delivery the worker's predecessor was
// running when its handler exited the goroutine: the group's queue is
// served first.
func (l *listener) worker(g *group) {
	clean := false
	defer func() {
		if !clean {
			// runtime.Goexit in a handler, whose delivery is settled
			// already: a new worker takes this one's place (and its count
			// in wg), and the rest of its group.
			go l.worker(g)
			return
		}
		l.wg.Done()
	}()
	for {
		for g != nil {
			msg := l.next(g)
			if msg == nil {
				g = nil
				break
			}
			l.run(msg)
		}
		t, ok := l.take()
		if !ok {
			break
		}
		g = t.g
		l.run(t.msg)
	}
	clean = true
}

// run handles one delivery, or gives it back when no handler may start.
func (l *listener) run(msg *amqp.Message) {
	if l.halted() {
		l.c.giveBack(l.hctx, l.r, msg)
		return
	}
	_ = l.c.handle(l.hctx, l.quit, l.r, msg, l.onSettleErr)
}

// join queues msg behind its group's delivery in flight and returns nil,
// or, when the group has none, opens the group and returns it.
func (l *listener) join(id string, msg *amqp.Message) *group {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.groups[id]; g != nil && g.busy {
		if len(g.q) == cap(g.q) && g.head > 0 {
			// Full: reuse the room of the deliveries already taken
			// rather than grow (a group that never runs dry would).
			n := copy(g.q, g.q[g.head:])
			clear(g.q[n:])
			g.q, g.head = g.q[:n], 0
		}
		g.q = append(g.q, msg)
		return nil
	}
	g := l.groups[id]
	if g == nil {
		if n := len(l.spare); n > 0 {
			g = l.spare[n-1]
			l.spare = l.spare[:n-1]
		} else {
			g = &group{}
		}
		g.id = id
		l.groups[id] = g
	} else {
		l.idle--
	}
	g.busy = true
	return g
}

// next takes the group's next queued delivery, or, when none is queued,
// makes the group idle and returns nil.
func (l *listener) next(g *group) *amqp.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.head < len(g.q) {
		msg := g.q[g.head]
		g.q[g.head] = nil
		g.head++
		return msg
	}
	l.idleGroup(g)
	return nil
}

// maxIdleGroups is how many idle groups stay in the map, so a group that
// comes back soon costs a lookup rather than an insert and a delete.
const maxIdleGroups = 1024

// idleGroup marks a group with nothing in flight and nothing queued. Past
// maxIdleGroups, every idle group is forgotten (the sweep is amortized over
// as many idle transitions). l.mu is held.
func (l *listener) idleGroup(g *group) {
	g.q, g.head, g.busy = g.q[:0], 0, false
	l.idle++
	if l.idle <= maxIdleGroups {
		return
	}
	for id, ig := range l.groups {
		if ig.busy {
			continue
		}
		delete(l.groups, id)
		if len(l.spare) < 2*l.c.concurrency {
			ig.id = ""
			l.spare = append(l.spare, ig)
		}
	}
	l.idle = 0
}
