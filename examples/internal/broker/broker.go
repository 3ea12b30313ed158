// Package broker is what the examples share to reach Artemis: the broker
// URL from the environment, and a plain go-amqp connection for the
// examples that work below the library's Client (putting a raw message on
// a queue, browsing or moving dead-letter records).
package broker

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/Azure/go-amqp"
)

// DefaultURL is the broker of `scripts/artemis start`.
const DefaultURL = "amqp://babel:babel@127.0.0.1:5672"

// URL returns ARTEMIS_URL, or DefaultURL when it is not set.
func URL() string {
	if u := os.Getenv("ARTEMIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Redact returns raw with its password replaced by xxxxx, for printing.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a broker URL that does not parse)"
	}
	return u.Redacted()
}

// Dial opens a go-amqp connection to raw (amqp:// or amqps://), sending the
// URL's userinfo as SASL PLAIN credentials, as the library's Client does.
// Errors never show the password.
func Dial(ctx context.Context, raw string) (*amqp.Conn, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("the broker URL %s does not parse", Redact(raw))
	}
	opts := &amqp.ConnOptions{}
	if u.User != nil {
		pass, _ := u.User.Password()
		opts.SASLType = amqp.SASLTypePlain(u.User.Username(), pass)
	}
	bare := *u
	bare.User = nil
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, bare.String(), opts)
	if err != nil {
		// go-amqp's errors name the address without userinfo.
		return nil, fmt.Errorf("connect to %s: %w", Redact(raw), err)
	}
	return conn, nil
}

// QueueSender attaches a sender to queue with the "queue" capability (an
// anycast queue on Artemis) that sends unsettled, so every transfer gets
// the broker's outcome.
func QueueSender(ctx context.Context, s *amqp.Session, queue string) (*amqp.Sender, error) {
	mode := amqp.SenderSettleModeUnsettled
	return s.NewSender(ctx, queue, &amqp.SenderOptions{
		TargetCapabilities: []string{"queue"},
		SettlementMode:     &mode,
	})
}
