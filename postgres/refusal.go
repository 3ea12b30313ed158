package postgres

import (
	"errors"
	"fmt"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// ErrQueueRefused is matched by the error of a row whose queue the broker
// refused to take messages for: it refused the attach of the relay's
// sender to that queue with one of the conditions of queueConditions (not
// authorized, no such address and auto-create off, ...). Such a refusal
// counts against the row, as a refused transfer does.
var ErrQueueRefused = errors.New("babelqueue/postgres: the broker refused the queue")

// queueConditions are the conditions of a refused attach that are the
// broker's answer about the queue itself, which trying again at once will
// not change. Any other failure to attach (a lost connection, a link the
// broker detached to move it, a timeout) is a failure of the way to the
// broker, counted against no row.
var queueConditions = map[amqp.ErrCond]bool{
	amqp.ErrCondUnauthorizedAccess:    true, // the user may not send to it
	amqp.ErrCondNotFound:              true, // no such address, and auto-create is off
	amqp.ErrCondNotAllowed:            true,
	amqp.ErrCondResourceDeleted:       true,
	amqp.ErrCondInvalidField:          true,
	amqp.ErrCondPreconditionFailed:    true,
	amqp.ErrCondResourceLimitExceeded: true,
}

// queueRefusal returns the ErrQueueRefused error for queue when err is a
// refusal of the attach to it (see queueConditions), else nil. The outcome
// of a transfer never is: refused (ErrNotAccepted, counted as such) or
// unknown (it may have been stored).
func queueRefusal(queue string, err error) error {
	if err == nil || errors.Is(err, artemis.ErrOutcomeUnknown) || errors.Is(err, artemis.ErrNotAccepted) {
		return nil
	}
	var (
		ce *amqp.ConnError
		se *amqp.SessionError
		ae *amqp.Error
	)
	if errors.As(err, &ce) || errors.As(err, &se) || !errors.As(err, &ae) || !queueConditions[ae.Condition] {
		return nil
	}
	return fmt.Errorf("%w %s (%s): %w", ErrQueueRefused, queue, ae.Condition, err)
}
