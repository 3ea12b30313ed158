// Command redrive moves dead-letter records from <queue>.dlq back to their
// original queue, as fresh deliveries: attempts reset to 0 and the
// dead_letter block removed. Everything else of the envelope (job,
// trace_id, data, meta with any keys this library does not know, unknown
// top-level keys) and the out-of-band headers (traceparent, ...) go back
// unchanged.
//
//	cd examples && go run ./redrive [-queue orders] [-all] [-dry-run]
//
// By default only records whose reason is "failed" move: the handler may
// work now. -all moves every record that is a valid envelope (unknown_urn
// ones too, for when the handler has been deployed since). A poison record
// is not a valid envelope, so it can never be redriven: it stays on the
// dead-letter queue and is reported. -dry-run browses the dead-letter
// queue (copy mode, nothing consumed) and lists what would move.
//
// Nothing is lost if redrive stops half-way. Each record is a delivery on
// the dead-letter queue that stays unsettled until its copy is safe: the
// copy is published to the original queue and the broker's acceptance
// awaited FIRST, and only then is the dead-letter delivery accepted.
// Records that do not move are held unsettled while the queue is read
// (released at once, Artemis would hand them straight back), then given a
// plain release, which leaves them on the queue uncounted. If redrive dies
// between the publish and the accept, the record is still on the
// dead-letter queue and its copy is on the original queue: the next run
// publishes it again, a duplicate, never a loss. That duplicate is dropped
// by Artemis's duplicate detection: every copy carries _AMQ_DUPL_ID, the
// same for the same record in every run.
//
// That id is a hash of the record, not meta.id (what
// artemis.WithDuplicateDetection sets). Artemis remembers duplicate ids
// per address and drops a repeat while still answering "accepted", so a
// redrive under meta.id would be silently dropped whenever the original
// publish used WithDuplicateDetection, or the message was redriven before,
// and redrive would then accept the record: a loss. A record's hash
// differs for each time the message was dead-lettered (failed_at is in
// it). Artemis's duplicate-id cache is bounded (id-cache-size, 20000 ids
// per address by default): re-run an interrupted redrive before that many
// other ids went to the same queue.
//
// The broker is ARTEMIS_URL (default amqp://babel:babel@127.0.0.1:5672).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/broker"
)

type config struct {
	URL     string
	Queue   string // the dead-letter queue is Queue + ".dlq"
	All     bool
	DryRun  bool
	Idle    time.Duration
	Timeout time.Duration
}

func main() {
	cfg := config{URL: broker.URL()}
	flag.StringVar(&cfg.Queue, "queue", "orders", "the queue whose dead-letter queue (<queue>.dlq) to redrive")
	flag.BoolVar(&cfg.All, "all", false, "move every valid envelope, not only records with reason failed")
	flag.BoolVar(&cfg.DryRun, "dry-run", false, "list what would move and change nothing")
	flag.DurationVar(&cfg.Idle, "idle", time.Second, "the queue counts as read once no record has come for this long")
	flag.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "give up after this long (records not yet moved stay)")
	flag.Parse()

	broker.Main("redrive", func(ctx context.Context, out io.Writer) error { return run(ctx, cfg, out) })
}

// plan is what happens to one record.
type plan struct {
	move   bool
	env    *artemis.Envelope // the envelope to publish, attempts 0, no dead_letter
	target string            // its original queue
	label  string            // how the record is shown
	why    string            // why it stays
	dupID  string
	hdrs   map[string]string
	before int // attempts on the record
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	dlq := cfg.Queue + ".dlq"
	which := `records with reason "failed"`
	if cfg.All {
		which = "every record that is a valid envelope"
	}
	mode := ""
	if cfg.DryRun {
		mode = " (dry run)"
	}
	fmt.Fprintf(out, "redrive %s%s: moving %s back to their original queue\n", dlq, mode, which)

	conn, sess, err := broker.Session(ctx, cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	if cfg.DryRun {
		return dryRun(ctx, sess, cfg, dlq, out)
	}
	return redrive(ctx, sess, cfg, dlq, out)
}

// dryRun browses the dead-letter queue: the copy distribution mode leaves
// every record where it is.
func dryRun(ctx context.Context, sess *amqp.Session, cfg config, dlq string, out io.Writer) error {
	r, err := broker.BrowseReceiver(ctx, sess, dlq)
	if err != nil {
		return err
	}
	defer r.Close(context.WithoutCancel(ctx))
	moves, stays := 0, 0
	for {
		msg, err := broker.ReceiveOrIdle(ctx, r, cfg.Idle)
		if err != nil {
			return fmt.Errorf("browse %s: %w", dlq, err)
		}
		if msg == nil {
			break
		}
		p := decide(msg, cfg, dlq)
		if p.move {
			moves++
			fmt.Fprintf(out, "  would move  %s -> %s (attempts %d -> 0)\n", p.label, p.target, p.before)
		} else {
			stays++
			fmt.Fprintf(out, "  would keep  %s: %s\n", p.label, p.why)
		}
	}
	fmt.Fprintf(out, "dry run, nothing was changed: %d would move, %d would stay\n", moves, stays)
	return nil
}

// window is the receiver's credit: how many records the broker may send
// ahead.
const window = 10

func redrive(ctx context.Context, sess *amqp.Session, cfg config, dlq string, out io.Writer) (err error) {
	// Unsettled deliveries and manual credit: a held record keeps its
	// credit, so credit is given back per record received, not per
	// settlement.
	r, err := broker.QueueReceiver(ctx, sess, dlq, -1)
	if err != nil {
		return err
	}
	var held []*amqp.Message
	defer func() {
		// Records that do not move go back with a plain release: on the
		// queue again, their delivery count untouched. Closing the link
		// returns whatever was sent ahead and not yet taken.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, m := range held {
			if rerr := r.ReleaseMessage(sctx, m); rerr != nil {
				err = errors.Join(err, fmt.Errorf("release a record on %s: %w (it returns to the queue when the link closes)", dlq, rerr))
				break
			}
		}
		_ = r.Close(sctx)
	}()
	if err := r.IssueCredit(window); err != nil {
		return err
	}

	publishers := map[string]*artemis.Publisher{}
	moved := 0
	for {
		msg, err := broker.ReceiveOrIdle(ctx, r, cfg.Idle)
		if err != nil {
			return fmt.Errorf("receive from %s after %d moved: %w", dlq, moved, err)
		}
		if msg == nil {
			break
		}
		if err := r.IssueCredit(1); err != nil {
			return err
		}
		p := decide(msg, cfg, dlq)
		if !p.move {
			held = append(held, msg)
			fmt.Fprintf(out, "  kept   %s: %s\n", p.label, p.why)
			continue
		}
		pub := publishers[p.target]
		if pub == nil {
			s, err := broker.QueueSender(ctx, sess, p.target)
			if err != nil {
				held = append(held, msg)
				return fmt.Errorf("attach a sender to %s: %w", p.target, err)
			}
			defer s.Close(context.WithoutCancel(ctx))
			pub = artemis.NewPublisher(s, p.target)
			publishers[p.target] = pub
		}
		// 1. The copy, confirmed: PublishEnvelope returns only once the
		// broker accepted the transfer.
		if _, err := pub.PublishEnvelope(ctx, p.env, artemis.WithHeaders(p.hdrs)); err != nil {
			held = append(held, msg)
			return fmt.Errorf("%s stays on %s: %w", p.label, dlq, err)
		}
		// 2. Only now the record leaves the dead-letter queue.
		if err := r.AcceptMessage(ctx, msg); err != nil {
			return fmt.Errorf("%s was published to %s but not taken off %s (%w): the next run sends it again, and Artemis drops that duplicate", p.label, p.target, dlq, err)
		}
		moved++
		fmt.Fprintf(out, "  moved  %s -> %s (attempts %d -> 0)\n", p.label, p.target, p.before)
	}
	fmt.Fprintf(out, "done: %d moved, %d kept on %s\n", moved, len(held), dlq)
	return nil
}

// decide reads a record and says whether it moves, and where.
func decide(msg *amqp.Message, cfg config, dlq string) plan {
	body := broker.BodyText(msg)
	env, err := artemis.Decode([]byte(body))
	if err != nil {
		return plan{label: "poison record " + quoteShort(body), why: "not a valid envelope, cannot be redriven (" + err.Error() + ")"}
	}
	p := plan{label: fmt.Sprintf("%s meta.id %s", orDash(env.Job), orDash(env.Meta.ID))}
	dl := env.DeadLetter
	if dl == nil {
		p.why = "no dead_letter block: not a BabelQueue dead-letter record"
		return p
	}
	p.label += " (reason " + dl.Reason + ")"
	p.before = env.Attempts
	env.Attempts = 0
	env.DeadLetter = nil
	if err := env.Validate(); err != nil {
		if raw, ok := rawOf(body); ok {
			p.label = "poison record " + quoteShort(raw)
		}
		p.why = "not a valid envelope, cannot be redriven (" + err.Error() + ")"
		return p
	}
	if dl.Reason != artemis.ReasonFailed && !cfg.All {
		p.why = "reason " + dl.Reason + " (use -all to move it)"
		return p
	}
	p.target = dl.OriginalQueue
	if p.target == "" {
		p.target = cfg.Queue // the dead-letter queue is <queue>.dlq
	}
	if p.target == dlq {
		p.why = "its original queue is the dead-letter queue itself"
		return p
	}
	sum := sha256.Sum256([]byte(body))
	p.move, p.env = true, env
	p.hdrs = headers(msg)
	p.hdrs[artemis.PropDuplicateID] = "redrive-" + hex.EncodeToString(sum[:16])
	return p
}

// headers are the record's out-of-band headers (traceparent, ...): its
// string application properties less the contract's bq_ ones, which the
// publish writes anew, and Artemis's own _AMQ_ ones.
func headers(msg *amqp.Message) map[string]string {
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

// rawOf returns the original body a poison record keeps under "raw".
func rawOf(body string) (string, bool) {
	var rec struct {
		Raw *string `json:"raw"`
	}
	if json.Unmarshal([]byte(body), &rec) != nil || rec.Raw == nil {
		return "", false
	}
	return *rec.Raw, true
}

func quoteShort(s string) string {
	r := []rune(s)
	if len(r) > 60 {
		return fmt.Sprintf("%q...", string(r[:60]))
	}
	return fmt.Sprintf("%q", s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
