package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Reading or redriving a queue must never create it: Artemis auto-creates
// the queue of an AMQP link that asks for the "queue" capability (and the
// address of one that does not), so a misspelt name would come into being,
// empty, and the command would report nothing to do. No attach option
// stops that, so every queue a command reads or redrives to is looked up
// first in the broker's queue list (its management address, as stats
// reads it), and a missing one is an error that names it. The check and
// the attach are two steps: a queue deleted between them is auto-created
// again by the attach.

// queues answers whether queues exist, asking the broker once per command.
type queues struct {
	s     *session
	names map[string]bool // nil until first asked
}

func newQueues(s *session) *queues { return &queues{s: s} }

// exists reports whether the broker has queue (for a fully qualified
// address::queue name, the part after the first "::", where Artemis splits it).
func (q *queues) exists(ctx context.Context, queue string) (bool, error) {
	if q.names == nil {
		m, err := newManager(ctx, q.s)
		if err != nil {
			return false, fmt.Errorf("cannot check that queue %s exists: %w", queue, err)
		}
		defer m.close(context.WithoutCancel(ctx))
		names, err := m.queueSet(ctx)
		if err != nil {
			return false, fmt.Errorf("cannot check that queue %s exists (may the user send to the management address %s?): %w", queue, managementAddress, err)
		}
		q.names = names
	}
	name := queue
	if i := strings.Index(queue, "::"); i >= 0 {
		name = queue[i+2:]
	}
	return q.names[name], nil
}

// errQueueMissing is matched (errors.Is) by the error for a queue the
// broker does not have.
var errQueueMissing = errors.New("no such queue")

// missingQueue is the error for a queue the broker does not have, naming it.
func missingQueue(queue string) error {
	return fmt.Errorf("queue %s does not exist on the broker (check its name; %s does not create queues): %w", queue, programName, errQueueMissing)
}

// errAddressMissing is matched (errors.Is) by the error for an address
// the broker does not have.
var errAddressMissing = errors.New("no such address")

// missingAddress is the error for an address the broker does not have,
// naming it.
func missingAddress(address string) error {
	return fmt.Errorf("address %s does not exist on the broker (check its name; %s does not create addresses): %w", address, programName, errAddressMissing)
}

// require fails unless queue exists, with an error that names it.
func (q *queues) require(ctx context.Context, queue string) error {
	ok, err := q.exists(ctx, queue)
	if err != nil {
		return err
	}
	if !ok {
		return missingQueue(queue)
	}
	return nil
}
