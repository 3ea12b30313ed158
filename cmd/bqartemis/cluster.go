package main

import (
	"context"
	"errors"
	"fmt"
)

// clusterCommands are the commands -cluster runs once per member: a cluster
// member has its own queues, dead-letter queues and counters. publish goes
// to one broker and takes no -cluster.
var clusterCommands = map[string]bool{"inspect": true, "redrive": true, "remove": true, "peek": true, "stats": true}

// runMembers runs the command: once, or with -cluster once per -url (each
// URL one member of an Artemis cluster), each member's output under a
// "== member I: URL" line, every member's failure reported and the first
// one returned.
func runMembers(ctx context.Context, name string, env *environment, args []string, runCmd func(context.Context, []string) error) error {
	if !env.conn.cluster {
		return runCmd(ctx, args)
	}
	if !clusterCommands[name] {
		return usagef("-cluster does not apply to %s (it acts on one broker)", name)
	}
	all := append(urlList(nil), env.conn.urls...)
	if len(all) == 0 {
		return usagef("-cluster needs one -url per member")
	}
	var failed []error
	absent := 0 // members without the queue (or address): not a failure while another has it
	for i, u := range all {
		env.conn.urls = urlList{u}
		shown := "(unparsable URL)"
		if ts, err := env.conn.targets(); err == nil && len(ts) == 1 {
			shown = ts[0].shown
		}
		fmt.Fprintf(env.stdout, "== member %d: %s\n", i+1, shown)
		if err := runCmd(ctx, args); err != nil {
			var ue *usageError
			if errors.As(err, &ue) {
				return err // the same for every member
			}
			if onlyMissing(err) {
				// A member that never got a message for the queue has none:
				// Artemis creates a queue on a member on its first message,
				// and a topic's address where a client used it.
				fmt.Fprintf(env.stdout, "member %d: %s\n", i+1, env.conn.scrub(err.Error()))
				absent++
				failed = append(failed, fmt.Errorf("member %d: %w", i+1, err))
				continue
			}
			fmt.Fprintf(env.stdout, "member %d: FAILED: %s\n", i+1, env.conn.scrub(err.Error()))
			failed = append(failed, fmt.Errorf("member %d: %w", i+1, err))
		}
	}
	env.conn.urls = all
	if absent < len(all) && absent == len(failed) {
		return nil // the queue is on the other members, and all went well there
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d members failed: %w", len(failed), len(all), errors.Join(failed...))
	}
	return nil
}

// onlyMissing reports whether every error joined in err says a queue or
// an address is missing (errQueueMissing, errAddressMissing), and nothing
// else failed.
func onlyMissing(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		for _, e := range errs {
			if !onlyMissing(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	return errors.Is(err, errQueueMissing) || errors.Is(err, errAddressMissing)
}
