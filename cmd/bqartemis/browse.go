package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// filter selects records by reason, URN and age.
type filter struct {
	reason string        // "" any
	urn    string        // "" any
	from   string        // "" any: else only what the broker moved from this queue
	since  time.Duration // 0 any: else failed_at within this long before now
	now    func() time.Time
}

func (f *filter) match(r *record) bool {
	if f.reason != "" && (r.Reason == nil || *r.Reason != f.reason) {
		return false
	}
	if f.urn != "" && r.URN != f.urn {
		return false
	}
	if f.from != "" && r.OrigQueue != f.from && brokerTarget(r) != f.from {
		return false
	}
	if f.since > 0 {
		at := r.FailedAt
		if at == nil {
			at = r.ExpiredAt // what the broker expired: when it did
		}
		if at == nil || time.UnixMilli(*at).Before(f.now().Add(-f.since)) {
			return false
		}
	}
	return true
}

// browseFlags are the flags of the commands that read a queue.
type browseFlags struct {
	json bool
	max  int
	idle time.Duration
}

func (b *browseFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&b.json, "json", false, "print one JSON object per line")
	fs.IntVar(&b.max, "max", 0, "stop after `N` records (0: all)")
	fs.DurationVar(&b.idle, "idle", time.Second, "the queue counts as read once nothing has come for this `duration`")
}

func (b *browseFlags) check() error {
	if b.max < 0 {
		return usagef("-max %d: want 0 (all) or more", b.max)
	}
	if b.idle <= 0 {
		return usagef("-idle %v: want > 0", b.idle)
	}
	return nil
}

// oneQueue checks the positional arguments of a one-queue command.
func oneQueue(args []string, what string) (string, error) {
	if len(args) != 1 {
		return "", usagef("want one %s, got %d arguments", what, len(args))
	}
	q := strings.TrimSpace(args[0])
	if q == "" {
		return "", usagef("the %s is blank", what)
	}
	return q, nil
}

// browse reads copies of the messages on queue, leaving them in place, and
// hands each to fn until fn says stop or the queue is read.
func browse(ctx context.Context, s *session, queue string, idle time.Duration, fn func(*amqp.Message) (more bool, err error)) error {
	r, err := queuelink.Browser(ctx, s.sess, queue)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = r.Close(cctx)
	}()
	for {
		msg, err := queuelink.ReceiveOrIdle(ctx, r, idle)
		if err != nil {
			return fmt.Errorf("browse %s: %w", queue, err)
		}
		if msg == nil {
			return nil
		}
		more, err := fn(msg)
		if err != nil || !more {
			return err
		}
	}
}

// browseQueue opens a session, checks that queue exists, and browses it
// (see browse). When fn stopped before the end of the queue, depth is
// the queue's message count as the broker gives it (management attribute
// MessageCount: scheduled and delivering messages included), so a count
// can say "1 of 2"; else depth is -1 (the caller counted the whole queue).
func browseQueue(ctx context.Context, env *environment, queue string, idle time.Duration, fn func(*amqp.Message) (more bool, err error)) (depth int64, err error) {
	ctx, s, err := env.conn.open(ctx)
	if err != nil {
		return -1, err
	}
	defer s.Close()
	if err := newQueues(s).require(ctx, queue); err != nil {
		return -1, err
	}
	stopped := false
	err = browse(ctx, s, queue, idle, func(msg *amqp.Message) (bool, error) {
		more, err := fn(msg)
		stopped = err == nil && !more
		return more, err
	})
	if err != nil || !stopped {
		return -1, err
	}
	return queueDepth(ctx, s, queue)
}

// queueDepth is the queue's message count as the broker gives it
// (management attribute MessageCount).
func queueDepth(ctx context.Context, s *session, queue string) (int64, error) {
	m, err := newManager(ctx, s)
	if err != nil {
		return -1, err
	}
	defer m.close(context.WithoutCancel(ctx))
	st, err := m.queueStat(ctx, queue)
	if err != nil {
		return -1, fmt.Errorf("count the messages on %s: %w", queue, err)
	}
	return st.Messages, nil
}

// ofTotal is "N" of a count: the messages read, or the queue's depth
// when the browse stopped early and the broker counts more.
func ofTotal(seen int, depth int64) int {
	if depth > int64(seen) {
		return int(depth)
	}
	return seen
}

// printRecord writes one record as a JSON line or a text line.
func printRecord(w io.Writer, r *record, asJSON bool) error {
	if !asJSON {
		_, err := fmt.Fprintln(w, r.textLine())
		return err
	}
	b, err := marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func setupInspect(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	var bf browseFlags
	bf.register(fs)
	var pf personalFlags
	pf.register(fs)
	f := filter{now: time.Now}
	fs.StringVar(&f.reason, "reason", "", "only records of this `reason` (failed, unknown_urn, poison, gated; what the broker moved: undelivered, expired)")
	fs.StringVar(&f.from, "from", "", "only what the broker dead-lettered or expired from this `queue` (on DLQ, ExpiryQueue)")
	fs.StringVar(&f.urn, "urn", "", "only records of this `URN`")
	fs.DurationVar(&f.since, "since", 0, "only records dead-lettered within this `duration` (e.g. 1h)")
	return func(ctx context.Context, args []string) error {
		queue, err := oneQueue(args, "dead-letter queue")
		if err != nil {
			return err
		}
		if err := bf.check(); err != nil {
			return err
		}
		if f.since < 0 {
			return usagef("-since %v: want > 0", f.since)
		}
		if err := pf.load(); err != nil {
			return err
		}
		shown, seen := 0, 0
		origins := map[string]int{} // what the broker moved, by the queue it came from
		depth, err := browseQueue(ctx, env, queue, bf.idle, func(msg *amqp.Message) (bool, error) {
			seen++
			r := readRecord(msg)
			if !f.match(r) {
				return true, nil
			}
			shown++
			pf.apply(r)
			if r.OrigQueue != "" {
				origins[brokerTarget(r)]++
			}
			if err := printRecord(env.stdout, r, bf.json); err != nil {
				return false, err
			}
			return bf.max == 0 || shown < bf.max, nil
		})
		if err != nil {
			return err
		}
		if !bf.json {
			if len(origins) > 0 {
				fmt.Fprintf(env.stderr, "shown by the queue the broker moved them from: %s\n", byCount(origins))
			}
			fmt.Fprintf(env.stderr, "%d of %s on %s shown (browsed, nothing consumed)\n", shown, plural(ofTotal(seen, depth), "record"), queue)
		}
		return nil
	}
}

func setupPeek(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	var bf browseFlags
	bf.register(fs)
	var pf personalFlags
	pf.register(fs)
	return func(ctx context.Context, args []string) error {
		queue, err := oneQueue(args, "queue")
		if err != nil {
			return err
		}
		if err := bf.check(); err != nil {
			return err
		}
		if err := pf.load(); err != nil {
			return err
		}
		n := 0
		depth, err := browseQueue(ctx, env, queue, bf.idle, func(msg *amqp.Message) (bool, error) {
			n++
			r := readRecord(msg).withDelivery(msg)
			pf.apply(r)
			if err := printRecord(env.stdout, r, bf.json); err != nil {
				return false, err
			}
			return bf.max == 0 || n < bf.max, nil
		})
		if err != nil {
			return err
		}
		if !bf.json {
			fmt.Fprintf(env.stderr, "%d of %s on %s shown (browsed, nothing consumed)\n", n, plural(ofTotal(n, depth), "message"), queue)
		}
		return nil
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// byCount lists counts as "orders 3, billing 1", the largest first.
func byCount(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
