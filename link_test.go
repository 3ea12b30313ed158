package artemis

import (
	"reflect"
	"testing"

	"github.com/Azure/go-amqp"
)

// TestLinkInterfacesFitGoAMQP checks, at run time, what the link interfaces'
// documentation promises: go-amqp's own links satisfy them, so a user passes
// an *amqp.Sender or *amqp.Receiver straight in, and an *amqp.Sender is
// confirmed through its receipts, not as an outcomeSender.
func TestLinkInterfacesFitGoAMQP(t *testing.T) {
	sender, receiver := reflect.TypeFor[*amqp.Sender](), reflect.TypeFor[*amqp.Receiver]()
	for _, c := range []struct {
		name string
		typ  reflect.Type
		ifc  reflect.Type
		want bool
	}{
		{"*amqp.Sender is a Sender", sender, reflect.TypeFor[Sender](), true},
		{"*amqp.Sender gives receipts", sender, reflect.TypeFor[receiptSender](), true},
		{"*amqp.Sender is not an outcomeSender", sender, reflect.TypeFor[outcomeSender](), false},
		{"*amqp.Receiver is a Receiver", receiver, reflect.TypeFor[Receiver](), true},
	} {
		if got := c.typ.Implements(c.ifc); got != c.want {
			t.Errorf("%s: Implements = %v, want %v", c.name, got, c.want)
		}
	}
}
