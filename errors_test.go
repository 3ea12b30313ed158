package artemis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
)

func TestDispositionNames(t *testing.T) {
	for d, want := range map[Disposition]string{
		DispositionPending:      "pending",
		DispositionAccepted:     "accepted",
		DispositionAbandoned:    "abandoned",
		DispositionReleased:     "released",
		DispositionDeadLettered: "dead_lettered",
		DispositionDropped:      "dropped",
		Disposition(99):         "pending",
	} {
		assert.Equal(t, want, d.String(), "Disposition(%d)", int(d))
	}
}

func TestDeliveryError(t *testing.T) {
	cause := errors.New("payment gateway timeout")
	tests := []struct {
		name string
		err  *DeliveryError
		want string
	}{
		{
			name: "routed and decoded",
			err:  &DeliveryError{Kind: KindHandlerFailed, URN: "urn:a", MessageID: "id-1", Attempts: 2, Disposition: DispositionAbandoned, Err: cause},
			want: ErrHandlerFailed.Error() + " (urn urn:a, id id-1, attempts 2): abandoned: payment gateway timeout",
		},
		{
			name: "routed, no meta.id",
			err:  &DeliveryError{Kind: KindUnknownURN, URN: "urn:b", Disposition: DispositionReleased},
			want: ErrUnknownURN.Error() + " (urn urn:b, attempts 0): released",
		},
		{
			name: "no urn",
			err:  &DeliveryError{Kind: KindPoison, Disposition: DispositionDeadLettered, Err: cause},
			want: ErrPoison.Error() + ": dead_lettered: payment gateway timeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.err.Error())
			assert.ErrorIs(t, tt.err, tt.err.Kind.Err())
			assert.NotErrorIs(t, tt.err, ErrSettlement, "only its own kind matches")
			assert.Equal(t, tt.err.Err, errors.Unwrap(tt.err)) //nolint:errorlint // the direct cause is what is tested
			if tt.err.Err != nil {
				assert.ErrorIs(t, tt.err, cause, "the cause is reachable")
			}
		})
	}
}

func TestPanicError(t *testing.T) {
	withErr := &PanicError{Value: io.ErrUnexpectedEOF}
	assert.Equal(t, "handler panicked: "+io.ErrUnexpectedEOF.Error(), withErr.Error())
	assert.ErrorIs(t, withErr, io.ErrUnexpectedEOF, "a panic with an error unwraps to it")

	withValue := &PanicError{Value: 42}
	assert.Equal(t, "handler panicked: 42", withValue.Error())
	assert.NoError(t, withValue.Unwrap(), "a panic with a non-error value has no cause")

	wrapped := fmt.Errorf("attempt: %w", withErr)
	var pe *PanicError
	assert.ErrorAs(t, wrapped, &pe)
}

func TestErrorClassification(t *testing.T) {
	cases := []struct {
		err            error
		link, conn     bool
		mayBeStoredErr bool
	}{
		{&amqp.LinkError{}, true, false, true},
		{fmt.Errorf("wrapped: %w", &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced}}), true, false, true},
		{&amqp.SessionError{}, true, true, true},
		{&amqp.ConnError{}, true, true, true},
		{refused, true, true, true},
		{net.ErrClosed, true, true, true},
		{context.Canceled, false, false, true},
		{context.DeadlineExceeded, false, false, true},
		{&amqp.Error{Condition: amqp.ErrCondTransferLimitExceeded, Description: "credit limit exceeded"}, false, false, false},
		{&OutcomeError{State: &amqp.StateRejected{}}, false, false, false},
		{errors.New("encode: message too large"), false, false, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%T %v", tc.err, tc.err), func(t *testing.T) {
			assert.Equal(t, tc.link, linkLost(tc.err), "linkLost")
			assert.Equal(t, tc.conn, connectionLost(tc.err), "connectionLost")
			assert.Equal(t, tc.mayBeStoredErr, mayBeStored(tc.err), "mayBeStored")
		})
	}
}
