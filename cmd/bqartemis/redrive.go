package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// redriveFlags select what redrive moves and where.
type redriveFlags struct {
	to     string
	reason string
	all    bool
	urn    string
	from   string // only messages the broker moved from this queue
	max    int
	dryRun bool
	bypass bool
	idle   time.Duration
}

// replayBypassHeader is the BabelQueue family's out-of-band replay-bypass
// header: a consumer that finds it "true" tells the handler the delivery
// is a deliberate replay (redrive -bypass stamps it).
const replayBypassHeader = "bq-replay-bypass"

func (f *redriveFlags) check() error {
	switch {
	case f.all && f.reason != "":
		return usagef("-reason and -all exclude each other")
	case f.max < 0:
		return usagef("-max %d: want 0 (all) or more", f.max)
	case f.idle <= 0:
		return usagef("-idle %v: want > 0", f.idle)
	}
	return nil
}

// reasonFilter is the reason a record must have: -reason, else failed
// (the handler may work now), else any with -all.
func (f *redriveFlags) reasonFilter() string {
	switch {
	case f.all:
		return ""
	case f.reason != "":
		return f.reason
	}
	return artemis.ReasonFailed
}

// move is what redrive does with one record.
type move struct {
	ok     bool
	rec    *record
	target string
	msg    *amqp.Message // the message to publish
	why    string        // why it stays
}

// plan decides about one DLQ record.
func (f *redriveFlags) plan(msg *amqp.Message, dlq string) move {
	r := readRecord(msg)
	m := move{rec: r}
	if r.OrigQueue != "" {
		return f.planBroker(msg, r, dlq)
	}
	if f.from != "" {
		m.why = "not moved there by the broker (-from " + f.from + ")"
		return m
	}
	switch r.Kind {
	case kindPoison:
		m.why = "a poison record is not an envelope: it cannot be redriven"
		return m
	case kindGated:
		m.why = fmt.Sprintf("a gated forward (bq_schema_version %q) is not a version 1 envelope: it cannot be redriven", *r.SchemaVersion)
		return m
	case kindEnvelope:
		m.why = "no dead_letter block: not a dead-letter record"
		return m
	}
	flt := filter{reason: f.reasonFilter(), urn: f.urn}
	if !flt.match(r) {
		switch {
		case flt.reason != "" && *r.Reason != flt.reason:
			m.why = "reason " + *r.Reason + " (-reason " + *r.Reason + " or -all moves it)"
		default:
			m.why = "urn " + r.URN + " does not match -urn"
		}
		return m
	}
	m.target = f.to
	if m.target == "" {
		m.target = *r.OriginalQueue
	}
	if m.target == "" {
		m.target = strings.TrimSuffix(dlq, dlqSuffix)
	}
	if m.target == dlq {
		m.why = "its original queue is the dead-letter queue itself (use -to)"
		return m
	}
	out, err := redriveMessage(r, msg, dlq, f.bypass)
	if err != nil {
		m.why = err.Error()
		return m
	}
	m.ok, m.msg = true, out
	return m
}

// planBroker decides about a message the broker itself dead-lettered or
// expired: it goes back whole (brokerCopy) to the queue it was taken from,
// or -to. -reason (undelivered, expired), -urn and -from select; without
// -reason every one moves (the handler-failure default, failed, does not
// apply to what the broker moved).
func (f *redriveFlags) planBroker(msg *amqp.Message, r *record, dlq string) move {
	m := move{rec: r}
	switch {
	case f.reason != "" && *r.Reason != f.reason:
		m.why = "reason " + *r.Reason + " (-reason " + *r.Reason + " or no -reason moves it)"
		return m
	case f.urn != "" && r.URN != f.urn:
		m.why = "urn " + r.URN + " does not match -urn"
		return m
	case f.from != "" && r.OrigQueue != f.from && brokerTarget(r) != f.from:
		m.why = "the broker moved it from " + r.OrigQueue + ", not -from " + f.from
		return m
	}
	m.target = f.to
	if m.target == "" {
		m.target = brokerTarget(r)
	}
	if m.target == dlq {
		m.why = "it would go back to " + dlq + " itself (use -to)"
		return m
	}
	m.ok, m.msg = true, brokerCopy(msg, r, dlq, f.bypass)
	return m
}

// redriveMessage is the record as a fresh delivery: attempts 0, no
// dead_letter block, the envelope re-encoded canonically by the library's
// projection, the record's out-of-band headers and group kept, and a
// duplicate id of its own (redriveID). With bypass it carries the
// replay-bypass header "true"; without, it carries none, even when the
// record came from a bypassed replay.
func redriveMessage(r *record, src *amqp.Message, dlq string, bypass bool) (*amqp.Message, error) {
	env := *r.env
	env.Attempts, env.DeadLetter = 0, nil
	hdrs := outOfBandHeaders(src)
	delete(hdrs, replayBypassHeader)
	if bypass {
		hdrs[replayBypassHeader] = "true"
	}
	hdrs[artemis.PropDuplicateID] = redriveID(dlq, r)
	opts := []artemis.PublishOption{artemis.WithHeaders(hdrs)}
	if p := src.Properties; p != nil && p.GroupID != nil {
		opts = append(opts, artemis.WithGroupID(*p.GroupID))
	}
	return artemis.NewMessage(&env, opts...)
}

// redriveID is the duplicate id of a redriven copy. It is the same for the
// same record in every run, so a redrive re-run after it stopped between
// the publish and the accept is stored once (Artemis drops the repeat and
// still answers accepted). It is not meta.id: an original publish with
// duplicate detection, or an earlier redrive of the same message, would
// make Artemis drop the copy while the record is accepted off the DLQ, a
// loss. failed_at differs each time the message is dead-lettered, so a
// message that fails again and is redriven again gets a new id. DLQ copies
// never carry a duplicate id, so the id never stops the message from
// reaching the dead-letter queue again.
func redriveID(dlq string, r *record) string {
	h := sha256.New()
	for _, part := range []string{dlq, r.MessageID, strconv.FormatInt(*r.FailedAt, 10), *r.Reason} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "bqartemis-redrive-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// outOfBandHeaders are the record's string application properties less
// the contract's bq_ ones (the projection writes them anew) and Artemis's
// own _AMQ_ ones.
func outOfBandHeaders(msg *amqp.Message) map[string]string {
	h := map[string]string{}
	for k, v := range msg.ApplicationProperties {
		s, ok := v.(string)
		if !ok || strings.HasPrefix(k, "bq_") || strings.HasPrefix(k, "_AMQ_") {
			continue
		}
		h[k] = s
	}
	return h
}

// checkTarget keeps a record whose target queue does not exist (a queue
// deleted since the record was dead-lettered): redrive creates no queue.
func (m *move) checkTarget(ctx context.Context, qs *queues) error {
	if !m.ok {
		return nil
	}
	ok, err := qs.exists(ctx, m.target)
	if err != nil {
		return err
	}
	if !ok {
		m.ok = false
		m.why = "its queue " + m.target + " does not exist (use -to)"
	}
	return nil
}

// how says what the move changes.
func (m *move) how() string {
	if m.rec.OrigQueue != "" {
		return "(as the broker took it, " + *m.rec.Reason + ")"
	}
	return fmt.Sprintf("(attempts %d -> 0)", m.rec.Attempts)
}

func (m *move) label() string {
	return fmt.Sprintf("%s %s id=%s", m.rec.Kind, orDash(m.rec.URN), orDash(m.rec.MessageID))
}

func setupRedrive(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	var f redriveFlags
	fs.StringVar(&f.to, "to", "", "move to this `queue` instead of each record's original_queue")
	fs.StringVar(&f.reason, "reason", "", "move records of this `reason` (default failed; what the broker moved: any, or undelivered, expired)")
	fs.BoolVar(&f.all, "all", false, "move records of every reason")
	fs.StringVar(&f.urn, "urn", "", "move only records of this `URN`")
	fs.StringVar(&f.from, "from", "", "move only what the broker dead-lettered or expired from this `queue` (DLQ, ExpiryQueue)")
	fs.IntVar(&f.max, "max", 0, "move at most `N` records (0: all)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "browse and say what would move; change nothing")
	fs.BoolVar(&f.bypass, "bypass", false, "mark each moved message as a deliberate replay (application property "+replayBypassHeader+"=true)")
	fs.DurationVar(&f.idle, "idle", time.Second, "the queue counts as read once nothing has come for this `duration`")
	return func(ctx context.Context, args []string) error {
		dlq, err := oneQueue(args, "dead-letter queue")
		if err != nil {
			return err
		}
		if err := f.check(); err != nil {
			return err
		}
		ctx, s, err := env.conn.open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		qs := newQueues(s)
		if err := qs.require(ctx, dlq); err != nil {
			return err
		}
		if f.to != "" {
			if err := qs.require(ctx, f.to); err != nil {
				return fmt.Errorf("-to: %w", err)
			}
		}
		if f.dryRun {
			return f.dryRunOn(ctx, s, qs, dlq, env)
		}
		return f.redrive(ctx, s, qs, dlq, env)
	}
}

func (f *redriveFlags) dryRunOn(ctx context.Context, s *session, qs *queues, dlq string, env *environment) error {
	moves, stays := 0, 0
	err := browse(ctx, s, dlq, f.idle, func(msg *amqp.Message) (bool, error) {
		m := f.plan(msg, dlq)
		if err := m.checkTarget(ctx, qs); err != nil {
			return false, err
		}
		if !m.ok || f.max > 0 && moves >= f.max {
			stays++
			why := m.why
			if m.ok {
				why = "-max reached"
			}
			fmt.Fprintf(env.stdout, "would keep  %s: %s\n", m.label(), why)
			return true, nil
		}
		moves++
		fmt.Fprintf(env.stdout, "would move  %s -> %s %s\n", m.label(), m.target, m.how())
		return true, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "dry run, nothing changed: %d would move, %d would stay on %s\n", moves, stays, dlq)
	return nil
}

// redrive consumes the DLQ. Each record stays unsettled until its fate is
// sure: a moving one is accepted only after its copy was published and
// the broker accepted it; one that stays is held, and released (plain
// release: no delivery-failed, its delivery count untouched) once the
// queue is read, because a record released at once would be handed
// straight back. If redrive stops between the publish and the accept, the
// record is still on the DLQ and the next run publishes it again under the
// same duplicate id, which Artemis stores once.
func (f *redriveFlags) redrive(ctx context.Context, s *session, qs *queues, dlq string, env *environment) (err error) {
	h, err := openHolding(ctx, s, dlq, f.idle)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.close(ctx)) }()
	senders := map[string]*amqp.Sender{}
	moved := 0
	var loops loopGuard
	for {
		// Once -max is reached, take back what the broker sent ahead,
		// without asking for more, and keep it.
		done := f.max > 0 && moved >= f.max
		msg, err := h.next(ctx, !done)
		if err != nil {
			return fmt.Errorf("receive from %s after %d moved: %w", dlq, moved, err)
		}
		if msg == nil {
			break
		}
		if done {
			h.hold(msg)
			continue
		}
		m := f.plan(msg, dlq)
		if err := loops.check(m.rec, dlq); err != nil {
			h.hold(msg)
			return fmt.Errorf("stopped after %d moved: %w", moved, err)
		}
		if err := m.checkTarget(ctx, qs); err != nil {
			h.hold(msg)
			return err
		}
		if !m.ok {
			h.hold(msg)
			fmt.Fprintf(env.stdout, "kept   %s: %s\n", m.label(), m.why)
			continue
		}
		snd := senders[m.target]
		if snd == nil {
			if snd, err = queuelink.Sender(ctx, s.sess, m.target); err != nil {
				h.hold(msg)
				return err
			}
			senders[m.target] = snd
		}
		// 1. The copy, confirmed: the broker accepted it (or dropped it as
		// a duplicate of an earlier run's copy, which it also accepts).
		if err := queuelink.SendAccepted(ctx, snd, m.msg); err != nil {
			h.hold(msg)
			return fmt.Errorf("%s stays on %s: publish to %s: %w", m.label(), dlq, m.target, err)
		}
		// 2. Only now the record leaves the DLQ.
		if err := h.take(ctx, msg); err != nil {
			return fmt.Errorf("%s was published to %s but not taken off %s (%w): a re-run publishes it again under the same duplicate id, which Artemis drops", m.label(), m.target, dlq, err)
		}
		moved++
		loops.moved(m.rec, m.target)
		fmt.Fprintf(env.stdout, "moved  %s -> %s %s\n", m.label(), m.target, m.how())
	}
	for _, snd := range senders {
		_ = snd.Close(ctx)
	}
	fmt.Fprintf(env.stdout, "done: %d moved, %d kept on %s\n", moved, h.kept(), dlq)
	return nil
}

// loopGuard stops a redrive that feeds a consumer which still fails: each
// record it moves goes straight back to the DLQ, and a redrive that went
// on would move it again and again until its timeout. A record counts as
// back when a record of the same meta.id, dead-lettered at another moment
// (failed_at), arrives after this run moved one. (Two records of one
// meta.id already on the DLQ before the run, dead-lettered at different
// moments, stop it too: a re-run moves the second.)
type loopGuard struct {
	movedAt map[string]loopEntry // meta.id -> the record moved
}

type loopEntry struct {
	failedAt int64
	target   string
}

func (g *loopGuard) moved(r *record, target string) {
	if r.MessageID == "" || r.FailedAt == nil {
		return
	}
	if g.movedAt == nil {
		g.movedAt = map[string]loopEntry{}
	}
	g.movedAt[r.MessageID] = loopEntry{failedAt: *r.FailedAt, target: target}
}

// check returns an error when r is a record this run moved, dead-lettered
// again.
func (g *loopGuard) check(r *record, dlq string) error {
	if r == nil || r.MessageID == "" || r.FailedAt == nil {
		return nil
	}
	e, ok := g.movedAt[r.MessageID]
	if !ok || e.failedAt == *r.FailedAt {
		return nil
	}
	why := ""
	if r.Reason != nil {
		why = " (" + *r.Reason
		if r.Error != nil && *r.Error != "" {
			why += ": " + short(*r.Error, 120)
		}
		why += ")"
	}
	return fmt.Errorf("%s id=%s came back to %s after this run moved it to %s: its consumer still fails it%s. It stays on %s; fix the consumer, then redrive again",
		orDash(r.URN), r.MessageID, dlq, e.target, why, dlq)
}
