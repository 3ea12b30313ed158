package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// scheduledMessage is one row of scheduled: a message waiting on a queue
// for its delivery time (a consumer's scheduled retry, a delayed publish).
type scheduledMessage struct {
	ID       string    `json:"id"`
	URN      string    `json:"urn"`
	Attempts *int      `json:"attempts"`
	Due      time.Time `json:"due"`
}

// readScheduled reads the result of the queue's
// listScheduledMessagesAsJSON operation: a JSON string holding an array of
// the messages' properties, as the broker keeps them (the AMQP
// message-id as userID with an "ID:" prefix, the annotations and
// application properties by name; no body).
func readScheduled(raw json.RawMessage) ([]scheduledMessage, error) {
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, fmt.Errorf("listScheduledMessagesAsJSON: not a JSON string: %s", short(string(raw), 120))
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(text), &rows); err != nil {
		return nil, fmt.Errorf("listScheduledMessagesAsJSON: %w", err)
	}
	out := make([]scheduledMessage, 0, len(rows))
	for _, r := range rows {
		var m scheduledMessage
		if s, ok := r["userID"].(string); ok {
			m.ID = strings.TrimPrefix(s, "ID:")
		}
		for _, k := range []string{"x-opt-jms-type", "subject", "JMSType"} {
			if s, ok := r[k].(string); ok && s != "" {
				m.URN = s
				break
			}
		}
		if s, ok := r["bq_attempts"].(string); ok {
			if n, err := strconv.Atoi(s); err == nil {
				m.Attempts = &n
			}
		}
		for _, k := range []string{"x-opt-delivery-time", "_AMQ_SCHED_DELIVERY"} {
			if f, ok := r[k].(float64); ok && f > 0 {
				m.Due = time.UnixMilli(int64(f)).UTC()
				break
			}
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Due.Before(out[j].Due) })
	return out, nil
}

func setupScheduled(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	limit := fs.Int("max", 0, "list at most `N` messages, the soonest due first (0: all)")
	return func(ctx context.Context, args []string) error {
		queue, err := oneQueue(args, "queue")
		if err != nil {
			return err
		}
		if *limit < 0 {
			return usagef("-max %d: want 0 (all) or more", *limit)
		}
		ctx, s, err := env.conn.open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		m, err := newManager(ctx, s)
		if err != nil {
			return err
		}
		defer m.close(context.WithoutCancel(ctx))
		res, err := m.call(ctx, []request{{resource: "queue." + queue, operation: "listScheduledMessagesAsJSON"}})
		if err != nil {
			if names, lerr := m.queueNames(ctx); lerr == nil && !contains(names, queue) {
				return missingQueue(queue)
			}
			return fmt.Errorf("queue %s: %w", queue, err)
		}
		rows, err := readScheduled(res[0])
		if err != nil {
			return err
		}
		total := len(rows)
		if *limit > 0 && len(rows) > *limit {
			rows = rows[:*limit]
		}
		if err := printScheduled(env.stdout, rows, *asJSON, time.Now()); err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprintf(env.stderr, "%d of %s scheduled on %s shown\n", len(rows), plural(total, "message"), queue)
		}
		return nil
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func printScheduled(w io.Writer, rows []scheduledMessage, asJSON bool, now time.Time) error {
	if asJSON {
		return printJSONLines(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DUE\tIN\tATTEMPTS\tURN\tID")
	for _, r := range rows {
		attempts := "-"
		if r.Attempts != nil {
			attempts = strconv.Itoa(*r.Attempts)
		}
		due, in := "-", "-"
		if !r.Due.IsZero() {
			due = r.Due.Format(time.RFC3339)
			in = max(r.Due.Sub(now), 0).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", due, in, attempts, r.URN, r.ID)
	}
	return tw.Flush()
}
