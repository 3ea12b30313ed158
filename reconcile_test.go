package artemis

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReconcileAttempts(t *testing.T) {
	tests := []struct {
		body  int
		count uint32
		want  int
	}{
		// The suite's cases are TestConformanceAttemptsReconciliation's;
		// these are the whole uint32 range of delivery-count.
		{0, math.MaxUint32, math.MaxUint32},
		{math.MaxInt, math.MaxUint32, math.MaxInt},
		{1 << 40, 7, 1 << 40},
	}
	for _, tt := range tests {
		if got := reconcileAttempts(tt.body, tt.count); got != tt.want {
			t.Errorf("reconcileAttempts(%d, %d) = %d, want %d", tt.body, tt.count, got, tt.want)
		}
	}
}

func TestHostileMaximalDeliveryCount(t *testing.T) {
	const dc = math.MaxUint32

	t.Run("the handler sees attempts 4294967295", func(t *testing.T) {
		var seen int
		c, rec, dlq := hostileConsumer(t, func(_ context.Context, env *Envelope, _ *amqp.Message) error {
			seen = env.Attempts
			return nil
		})
		got := handleOne(t, c, rec, dlq, orderMessage(t, dc))
		assert.Equal(t, fakelink.Accepted, got.disp)
		assert.Empty(t, got.reports)
		assert.Equal(t, 4294967295, seen)
	})

	t.Run("a failure is at the limit: dead-lettered with attempts 4294967295", func(t *testing.T) {
		cause := &gatewayError{"Payment gateway timeout"}
		c, rec, dlq := hostileConsumer(t, failing(cause))
		got := handleOne(t, c, rec, dlq, orderMessage(t, dc))
		de := requireReport(t, got, ErrHandlerFailed, DispositionDeadLettered)
		assert.Equal(t, 4294967295, de.Attempts)
		assert.Equal(t, fakelink.Accepted, got.disp, "accepted after the confirmed copy")
		require.Len(t, got.dlq, 1)
		env := dlqEnvelope(t, got.dlq[0])
		assert.Equal(t, 4294967295, env.Attempts)
		assert.Equal(t, 4294967295, env.DeadLetter.Attempts)
		assert.Equal(t, ReasonFailed, env.DeadLetter.Reason)
		assert.Equal(t, "4294967295", got.dlq[0].ApplicationProperties[PropAttempts])
		assert.Contains(t, got.dlq[0].Value, `"attempts":4294967295,"dead_letter":`)
	})

	t.Run("without a DLQ: dropped, reported with the attempts", func(t *testing.T) {
		rec := newRecorder()
		c := mustConsumer(t, Handlers{urnCreated: failing(errors.New("x"))}, WithOnError(rec.onError))
		got := handleOne(t, c, rec, nil, orderMessage(t, dc))
		de := requireReport(t, got, ErrHandlerFailed, DispositionDropped)
		assert.Equal(t, 4294967295, de.Attempts)
		assert.Equal(t, fakelink.Accepted, got.disp)
	})

	t.Run("a body attempts of math.MaxInt64 is at the limit, not retried", func(t *testing.T) {
		// attempts+1 overflows here; the library must not read it as below
		// the limit and redeliver forever.
		body := strings.Replace(fuzzEnvelope, `"attempts":0`, `"attempts":9223372036854775807`, 1)
		c, rec, dlq := hostileConsumer(t, failing(errors.New("x")))
		got := handleOne(t, c, rec, dlq, rawMessage(body))
		de := requireReport(t, got, ErrHandlerFailed, DispositionDeadLettered)
		assert.Equal(t, math.MaxInt64, de.Attempts)
		assert.Equal(t, fakelink.Accepted, got.disp)
		require.Len(t, got.dlq, 1)
		assert.Equal(t, math.MaxInt64, dlqEnvelope(t, got.dlq[0]).DeadLetter.Attempts)
	})
}

func TestHostileBodyAttempts(t *testing.T) {
	for _, tc := range []struct{ name, attempts, want string }{
		{"minus one", "-1", "attempts is not an integer >= 0: it is -1"},
		{"1e400", "1e400", "attempts is not an integer >= 0: it is 1e400"},
		{"2^70", "1180591620717411303424", "attempts is not an integer >= 0: it is 1180591620717411303424"},
		{"a fraction", "1.5", "attempts is not an integer >= 0: it is 1.5"},
		{"a string", `"1"`, `attempts is not an integer >= 0: it is "1"`},
		{"null", "null", "attempts is not an integer >= 0: it is null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(fuzzEnvelope, `"attempts":0`, `"attempts":`+tc.attempts, 1)
			c, rec, dlq := hostileConsumer(t, neverCalled(t))
			msg := rawMessage(body)
			msg.Header.DeliveryCount = 1
			got := handleOne(t, c, rec, dlq, msg)
			record, de := requirePoisonRecord(t, got)
			assert.ErrorIs(t, de, ErrInvalidEnvelope)
			assert.Contains(t, de.Error(), tc.want, "the error names attempts")
			assert.True(t, strings.HasPrefix(record, body[:len(body)-1]+`,"dead_letter":{"reason":"poison"`),
				"the object's bytes are kept and the block spliced in: %s", record)
			assert.Contains(t, record, `"attempts":1,"lang":"go"}}`, "the block has the delivery count")
		})
	}
}
