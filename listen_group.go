// A message group as Listen keeps it: the deliveries of one group-id are
// handled one at a time, in the order the link gave them.

package artemis

import "github.com/Azure/go-amqp"

// group is a message group Listen has seen. While busy, one of its
// deliveries is in a worker's hands (or about to be), and q holds the ones
// received after it.
type group struct {
	id   string
	q    []*amqp.Message
	head int
	busy bool // a delivery of the group is in a worker's hands or about to be
}

// groupID is the delivery's AMQP group-id, "" when it has none.
func groupID(msg *amqp.Message) string {
	if msg.Properties == nil || msg.Properties.GroupID == nil {
		return ""
	}
	return *msg.Properties.GroupID
}
