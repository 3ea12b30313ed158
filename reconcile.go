// Reconciliation: the attempts a handler sees, the larger of the body's
// attempts and what the broker's delivery-count says.

package artemis

import (
	"math"

	"github.com/Azure/go-amqp"
)

// reconcileAttempts returns the attempts a handler sees: the larger of the
// body's counter and the AMQP header delivery-count (0 on the first
// delivery), so a runtime-incremented body count is never lowered.
func reconcileAttempts(bodyAttempts int, deliveryCount uint32) int {
	dc := uint64(deliveryCount)
	if dc > math.MaxInt {
		dc = math.MaxInt
	}
	if int(dc) > bodyAttempts {
		return int(dc)
	}
	return bodyAttempts
}

func deliveryCount(msg *amqp.Message) uint32 {
	if msg.Header == nil {
		return 0
	}
	return msg.Header.DeliveryCount
}
