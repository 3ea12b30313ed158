package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
)

const reasonPoison = "poison"

// removeFlags select the records remove takes off a queue.
type removeFlags struct {
	ids    idList
	reason string
	urn    string
	from   string
	yes    bool
	idle   time.Duration
}

// idList is a repeatable -id flag; a value may list ids separated by commas.
type idList map[string]bool

func (l *idList) String() string { return "" }
func (l *idList) Set(s string) error {
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			return errors.New("a blank id")
		}
		if *l == nil {
			*l = idList{}
		}
		(*l)[id] = true
	}
	return nil
}

func (f *removeFlags) check() error {
	switch {
	case len(f.ids) == 0 && f.reason == "" && f.urn == "" && f.from == "":
		return usagef("say which records to remove: -id, -reason (e.g. poison), -urn or -from")
	case f.idle <= 0:
		return usagef("-idle %v: want > 0", f.idle)
	}
	return nil
}

// match reports whether remove takes r: every selector given must match.
func (f *removeFlags) match(r *record) bool {
	if len(f.ids) > 0 && !f.ids[r.MessageID] {
		return false
	}
	flt := filter{reason: f.reason, urn: f.urn, from: f.from}
	if f.reason == reasonPoison && r.Kind == kindPoison && r.Reason == nil {
		flt.reason = "" // a body that is no envelope at all is poison too
	}
	return flt.match(r)
}

func setupRemove(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	var f removeFlags
	fs.Var(&f.ids, "id", "remove the record of this message `id` (repeatable, or comma-separated)")
	fs.StringVar(&f.reason, "reason", "", "remove records of this `reason` (poison, failed, unknown_urn, gated; undelivered, expired)")
	fs.StringVar(&f.urn, "urn", "", "remove records of this `URN`")
	fs.StringVar(&f.from, "from", "", "remove what the broker dead-lettered or expired from this `queue`")
	fs.BoolVar(&f.yes, "yes", false, "remove them (without it: list what would be removed, change nothing)")
	fs.DurationVar(&f.idle, "idle", time.Second, "the queue counts as read once nothing has come for this `duration`")
	return func(ctx context.Context, args []string) error {
		queue, err := oneQueue(args, "queue")
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
		if err := newQueues(s).require(ctx, queue); err != nil {
			return err
		}
		if !f.yes {
			return f.dryRun(ctx, s, queue, env)
		}
		return f.remove(ctx, s, queue, env)
	}
}

// dryRun browses the queue and lists what remove -yes would take.
func (f *removeFlags) dryRun(ctx context.Context, s *session, queue string, env *environment) error {
	n, kept := 0, 0
	found := map[string]bool{}
	err := browse(ctx, s, queue, f.idle, func(msg *amqp.Message) (bool, error) {
		r := readRecord(msg)
		if !f.match(r) {
			kept++
			return true, nil
		}
		n++
		found[r.MessageID] = true
		fmt.Fprintf(env.stdout, "would remove  %s\n", r.textLine())
		return true, nil
	})
	if err != nil {
		return err
	}
	f.reportMissing(env, found, queue)
	fmt.Fprintf(env.stdout, "dry run, nothing removed: %d would be removed, %d would stay on %s", n, kept, queue)
	if n > 0 {
		fmt.Fprint(env.stdout, "; run again with -yes to remove them")
	}
	fmt.Fprintln(env.stdout)
	return nil
}

// reportMissing names the -id values no record on the queue has.
func (f *removeFlags) reportMissing(env *environment, found map[string]bool, queue string) {
	for id := range f.ids {
		if !found[id] {
			fmt.Fprintf(env.stderr, "no record of id %s on %s\n", id, queue)
		}
	}
}

// recordKey tells one record from another: the same message dead-lettered
// twice is two records (another failed_at, another broker message id).
func recordKey(r *record) string {
	k := r.Kind + "\x00" + r.MessageID + "\x00" + r.brokerMsgID
	if r.FailedAt != nil {
		k += "\x00" + strconv.FormatInt(*r.FailedAt, 10)
	}
	if r.ExpiredAt != nil {
		k += "\x00e" + strconv.FormatInt(*r.ExpiredAt, 10)
	}
	return k
}

// remove takes exactly the records it lists: it browses the queue and
// notes the matching records, then consumes it: a noted record is
// accepted (that is its removal), every other one, a record that came
// after the listing included, is held unsettled and given a plain release
// (no delivery-failed: its delivery count stays) once the queue is read,
// as redrive keeps what it does not move.
func (f *removeFlags) remove(ctx context.Context, s *session, queue string, env *environment) (err error) {
	listed := map[string]bool{}
	err = browse(ctx, s, queue, f.idle, func(msg *amqp.Message) (bool, error) {
		if r := readRecord(msg); f.match(r) {
			listed[recordKey(r)] = true
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if len(listed) == 0 {
		f.reportMissing(env, nil, queue)
		fmt.Fprintf(env.stdout, "done: nothing to remove on %s\n", queue)
		return nil
	}
	h, err := openHolding(ctx, s, queue, f.idle)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.close(ctx)) }()
	removed, late := 0, 0
	found := map[string]bool{}
	for {
		msg, err := h.next(ctx, true)
		if err != nil {
			return fmt.Errorf("receive from %s after %d removed: %w", queue, removed, err)
		}
		if msg == nil {
			break
		}
		rec := readRecord(msg)
		if !f.match(rec) {
			h.hold(msg)
			continue
		}
		if key := recordKey(rec); !listed[key] {
			h.hold(msg)
			late++
			continue
		}
		delete(listed, recordKey(rec))
		if err := h.take(ctx, msg); err != nil {
			return fmt.Errorf("remove %s id=%s from %s after %d removed: %w", rec.Kind, orDash(rec.MessageID), queue, removed, err)
		}
		removed++
		found[rec.MessageID] = true
		fmt.Fprintf(env.stdout, "removed  %s\n", rec.textLine())
	}
	f.reportMissing(env, found, queue)
	if late > 0 {
		fmt.Fprintf(env.stderr, "%s that came after the listing kept (run again to remove them)\n", plural(late, "matching record"))
	}
	if len(listed) > 0 {
		fmt.Fprintf(env.stderr, "%s listed but not found when consuming (taken by another consumer?)\n", plural(len(listed), "record"))
	}
	fmt.Fprintf(env.stdout, "done: %d removed, %d kept on %s\n", removed, h.kept(), queue)
	return nil
}
