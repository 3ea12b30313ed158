// The Client over an Artemis cluster, as the Client's backend: one
// single-broker client per member (each with its own URL list, re-dialled
// on its own), publishes spread over the members or pinned to one by their
// key, and a consume loop on every member.

package artemis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// clusterClient is DialCluster's backend: a client per member, each
// dialling its own URL list; it dials nothing itself.
type clusterClient struct {
	members  []*brokerClient
	red      redactor      // knows every member's passwords
	failFast bool          // ClientOptions.FailFast
	failover bool          // ClientOptions.ClusterFailover
	rr       atomic.Uint64 // round-robin position of unkeyed publishes
	closed   atomic.Bool
}

// newCluster builds DialCluster's backend, its members dialling with dial,
// without dialling yet.
func newCluster(nodes [][]string, opts *ClientOptions, dial dialFunc) (*clusterClient, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no cluster member", ErrInvalidConfig)
	}
	var all []string
	for i, urls := range nodes {
		if len(urls) == 0 {
			return nil, fmt.Errorf("%w: cluster member %d has no broker URL", ErrInvalidConfig, i+1)
		}
		all = append(all, urls...)
	}
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	c := &clusterClient{failFast: o.FailFast, failover: o.ClusterFailover}
	// The cluster validates every URL before any member's options, and
	// knows every password (to scrub them).
	c.red.add(o.Password)
	for _, raw := range all {
		c.red.addURLPassword(raw)
	}
	for _, raw := range all {
		if _, err := parseBroker(raw, o.Username, o.Password); err != nil {
			return nil, c.red.error(err)
		}
	}
	for _, urls := range nodes {
		m, err := newClient(urls, opts, dial)
		if err != nil {
			// Close the members built so far.
			_ = c.closeWithin(context.Background())
			return nil, err
		}
		c.members = append(c.members, m)
	}
	return c, nil
}

// dialMembers dials every member once, side by side; it fails only when
// none could be connected to.
func (c *clusterClient) dialMembers(ctx context.Context) error {
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { _, errs[i] = m.connection(ctx) })
	}
	wg.Wait()
	var failed []error
	for i, err := range errs {
		if err == nil {
			return nil
		}
		failed = append(failed, fmt.Errorf("member %d: %w", i+1, err))
	}
	if err := ctx.Err(); err != nil {
		return c.red.error(fmt.Errorf("%w: %w: %w", ErrConnect, err, errors.Join(failed...)))
	}
	return c.red.error(fmt.Errorf("%w: no cluster member answered: %w", ErrConnect, errors.Join(failed...)))
}

// closeWithin marks the cluster and every member closed at once, then
// waits for the members' teardowns until ctx ends.
func (c *clusterClient) closeWithin(ctx context.Context) error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Every member marked closed first, then their teardowns side by side.
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		cn, first := m.shut()
		if !first || cn == nil {
			continue
		}
		wg.Go(func() {
			if cn.dead() {
				_ = cn.conn.Close()
				return
			}
			if err := m.red.error(cn.conn.Close()); err != nil {
				errs[i] = fmt.Errorf("member %d: %w", i+1, err)
			}
		})
	}
	return waitFor(ctx, func() error {
		wg.Wait()
		return errors.Join(errs...)
	})
}

func (c *clusterClient) isClosed() bool { return c.closed.Load() }

// memberOf is the member index that key hashes to (FNV-1a).
func memberOf(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// routingKey is what pins msg to one member: its group-id, else its
// duplicate id; "" when it has neither.
func routingKey(msg *amqp.Message) string {
	if msg.Properties != nil && msg.Properties.GroupID != nil && *msg.Properties.GroupID != "" {
		return *msg.Properties.GroupID
	}
	if id, ok := msg.ApplicationProperties[PropDuplicateID].(string); ok {
		return id
	}
	return ""
}

// clusterSender is the outcomeSender of a cluster publisher: it routes each
// message to one member's reconnecting sender.
type clusterSender struct {
	c       *clusterClient
	addr    string
	members []*clientSender
}

// publishSender attaches a sender to queue (a topic's multicast address
// when topic is set) on every member, for a cluster
// Client's Publisher. It succeeds when at least one member attached: one
// that cannot be connected to now attaches on its first publish. A refusal
// (an address the user may not send to, say) is returned.
func (c *clusterClient) publishSender(ctx context.Context, queue string, topic bool) (publishLink, error) {
	s := &clusterSender{c: c, addr: queue}
	for _, m := range c.members {
		ms := m.newSender(queue)
		ms.topic = topic
		s.members = append(s.members, ms)
	}
	if err := s.attachAll(ctx); err != nil {
		// The links the other members attached are detached in the
		// background (each bounded by the dial timeout): a detach that
		// hangs does not hold the caller, past its ctx or at all.
		go func() { _ = s.close(context.WithoutCancel(ctx)) }()
		return nil, err
	}
	return s, nil
}

// attachAll attaches every member's sender side by side, without waiting
// for a member that is down; when none attached and the Client waits for
// connections (not FailFast), it waits within ctx for the first member to
// attach.
func (s *clusterSender) attachAll(ctx context.Context) error {
	res := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i, m := range s.members {
		wg.Go(func() { _, res[i] = m.link(ctx, false) })
	}
	wg.Wait()
	ok := false
	var errs []error
	for i, err := range res {
		if err == nil {
			ok = true
			continue
		}
		errs = append(errs, fmt.Errorf("member %d: %w", i+1, err))
	}
	for _, err := range errs {
		if !errors.Is(err, ErrConnect) {
			return err // refused by a member that answered
		}
	}
	if ok {
		return nil
	}
	if s.c.failFast {
		return errors.Join(errs...)
	}
	// Every member is down: wait for the first to come back.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan error, len(s.members))
	for _, m := range s.members {
		go func() { _, err := m.link(wctx, true); first <- err }()
	}
	var last error
	for range s.members {
		err := <-first
		if err == nil {
			return nil
		}
		last = err
	}
	return last
}

// order is the members to try for msg, in turn, and whether the first one
// is msg's own (a keyed message): the keyed member then the next ones; or,
// for an unkeyed message, the members that are connected, round robin,
// then the others.
func (s *clusterSender) order(msg *amqp.Message) (idx []int, keyed bool) {
	n := len(s.members)
	idx = make([]int, 0, n)
	if key := routingKey(msg); key != "" {
		start := memberOf(key, n)
		for k := range n {
			idx = append(idx, (start+k)%n)
		}
		return idx, true
	}
	var up, down []int
	for i, m := range s.c.members {
		if m.up() {
			up = append(up, i)
		} else {
			down = append(down, i)
		}
	}
	turn := s.c.rr.Add(1) - 1
	if len(up) > 0 {
		// Round robin over the members that are connected now.
		start := int(turn % uint64(len(up)))
		idx = append(idx, up[start:]...)
		idx = append(idx, up[:start]...)
		return append(idx, down...), false
	}
	start := int(turn % uint64(n))
	for k := range n {
		idx = append(idx, (start+k)%n)
	}
	return idx, false
}

// route sends msg with send on the member it belongs to. A keyed message
// stays on its member (waiting for it, as a single broker's publish does)
// unless ClusterFailover is set; an unkeyed one, or a keyed one with
// ClusterFailover, moves on to the next member when its member could not
// be connected to (nothing was sent), never after an unknown outcome (it
// may be stored). Only the last member tried waits for its connection.
func route[T any](ctx context.Context, s *clusterSender, msg *amqp.Message, send func(m *clientSender, wait bool) (T, error)) (T, error) {
	order, keyed := s.order(msg)
	wait := !s.c.failFast
	if keyed && !s.c.failover {
		return send(s.members[order[0]], wait)
	}
	var (
		zero  T
		first error
	)
	for k, i := range order {
		last := k == len(order)-1
		res, err := send(s.members[i], wait && last)
		if err == nil || !errors.Is(err, ErrConnect) || errors.Is(err, ErrOutcomeUnknown) || ctx.Err() != nil || s.c.isClosed() {
			return res, err
		}
		if first == nil {
			first = err
		}
	}
	return zero, first
}

// SendOutcome sends msg on its member (see route and Client.Publisher).
func (s *clusterSender) SendOutcome(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	return route(ctx, s, msg, func(m *clientSender, wait bool) (amqp.DeliveryState, error) {
		return m.sendOutcome(ctx, msg, wait)
	})
}

// send is SendOutcome for a Publisher (sendPath; see clientSender.send).
func (s *clusterSender) send(ctx context.Context, msg *amqp.Message) (amqp.DeliveryState, error) {
	state, err := s.SendOutcome(ctx, msg)
	return state, creditTimeout(ctx, err)
}

// start makes PublishWithReceipt pipeline on the member's link (sendPath).
func (s *clusterSender) start(ctx context.Context, msg *amqp.Message, r *Receipt) (bool, error) {
	return route(ctx, s, msg, func(m *clientSender, wait bool) (bool, error) {
		return m.startWait(ctx, msg, r, wait)
	})
}

// reuses: a cluster publisher projects onto a new message for every
// publish (sendPath).
func (s *clusterSender) reuses(bool) bool { return false }

// Send is SendOutcome for the Sender interface.
func (s *clusterSender) Send(ctx context.Context, msg *amqp.Message, _ *amqp.SendOptions) error {
	state, err := s.SendOutcome(ctx, msg)
	if err != nil {
		return err
	}
	return outcomeError(state)
}

// close detaches every member's link, side by side.
func (s *clusterSender) close(ctx context.Context) error {
	errs := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i, m := range s.members {
		wg.Go(func() { errs[i] = m.close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

var (
	_ outcomeSender = (*clusterSender)(nil)
	_ sendPath      = (*clusterSender)(nil)
)

// consume runs Consume on every member side by side. cons and o were
// validated, and credit settled, by Consume.
func (c *clusterClient) consume(ctx context.Context, queue string, src source, cons *Consumer, o consumeOptions, credit int32) error {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One memory of failed attempts for every member's loop: a message that
	// redistribution moves keeps its count (see docs/clusters.md).
	shared := *cons
	shared.memory = newAttemptMemory(attemptMemoryCap)
	errs := make(chan error, len(c.members))
	for _, m := range c.members {
		go func() { errs <- m.consume(mctx, queue, src, &shared, o, credit) }()
	}
	var first error
	for range c.members {
		err := <-errs
		if err != nil && first == nil {
			// A member's loop ended for good (closed, or refused): stop the
			// others and report it.
			first = err
			cancel()
		}
	}
	if first != nil && c.isClosed() {
		return ErrClosed
	}
	return first
}

// status is Status for a Client from DialCluster.
func (c *clusterClient) status() ClientStatus {
	var s ClientStatus
	for _, m := range c.members {
		ms := m.status()
		s.Members = append(s.Members, ms)
		if ms.Connected && !s.Connected {
			s.Connected, s.URL = true, ms.URL
		}
		if s.LastError == nil {
			s.LastError = ms.LastError
		}
		if ms.Since.After(s.Since) {
			s.Since = ms.Since
		}
	}
	if c.isClosed() {
		s.Connected, s.LastError = false, ErrClosed
	}
	if !s.Connected && len(s.Members) > 0 {
		s.URL = s.Members[0].URL
	}
	return s
}
