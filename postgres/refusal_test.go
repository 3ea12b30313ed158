package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// A refused attach counts against the row only when its condition is the
// broker's answer about the queue; a failure of the way to the broker, or
// the outcome of a transfer, never is one. No broker is needed.
func TestQueueRefusalClassifiesTheAttachFailures(t *testing.T) {
	attach := func(err error) error { return fmt.Errorf("attach sender to q: %w", err) }
	cond := func(c amqp.ErrCond) *amqp.Error { return &amqp.Error{Condition: c, Description: "d"} }
	for _, tc := range []struct {
		name    string
		err     error
		refused bool
	}{
		{"unauthorized", attach(cond(amqp.ErrCondUnauthorizedAccess)), true},
		{"not found", attach(cond(amqp.ErrCondNotFound)), true},
		{"not allowed", attach(cond(amqp.ErrCondNotAllowed)), true},
		{"resource deleted", attach(cond(amqp.ErrCondResourceDeleted)), true},
		{"invalid field", attach(cond(amqp.ErrCondInvalidField)), true},
		{"precondition failed", attach(cond(amqp.ErrCondPreconditionFailed)), true},
		{"resource limit", attach(cond(amqp.ErrCondResourceLimitExceeded)), true},
		{"link detached by the broker, unauthorized", attach(&amqp.LinkError{RemoteErr: cond(amqp.ErrCondUnauthorizedAccess)}), true},
		{"internal error", attach(cond(amqp.ErrCondInternalError)), false},
		{"detach forced", attach(&amqp.LinkError{RemoteErr: cond(amqp.ErrCondDetachForced)}), false},
		{"link stolen", attach(cond(amqp.ErrCondStolen)), false},
		{"link closed", attach(&amqp.LinkError{}), false},
		{"connection closed by the broker", attach(&amqp.ConnError{RemoteErr: cond(amqp.ErrCondUnauthorizedAccess)}), false},
		{"session ended by the broker", attach(&amqp.SessionError{RemoteErr: cond(amqp.ErrCondNotFound)}), false},
		{"timeout", attach(context.DeadlineExceeded), false},
		{"outcome unknown", fmt.Errorf("%w: %w", artemis.ErrOutcomeUnknown, cond(amqp.ErrCondUnauthorizedAccess)), false},
		{"transfer rejected", &artemis.OutcomeError{State: &amqp.StateRejected{Error: cond(amqp.ErrCondResourceLimitExceeded)}}, false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := queueRefusal("orders", tc.err)
			if !tc.refused {
				assert.NoError(t, got)
				return
			}
			assert.ErrorIs(t, got, ErrQueueRefused)
			assert.ErrorIs(t, got, tc.err, "the broker's error is kept")
			var ae *amqp.Error
			assert.True(t, errors.As(got, &ae))
			assert.Contains(t, got.Error(), "orders ("+string(ae.Condition)+")", "the queue and the condition named")
			assert.True(t, isRefusal(got), "counted against the row")
		})
	}
}
