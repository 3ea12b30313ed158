// Package broker is what the examples share to reach Artemis: the broker
// URL from the environment, a plain go-amqp connection and links for the
// examples that work below the library's Client (putting a raw message on
// a queue, browsing or moving dead-letter records), a message's body as
// text, and (start.go) the start-up every example's main shares.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
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

// Session dials raw with Dial and begins a session on the connection. The
// caller closes the connection (which ends the session too) when done; on
// an error nothing is left open.
func Session(ctx context.Context, raw string) (*amqp.Conn, *amqp.Session, error) {
	conn, err := Dial(ctx, raw)
	if err != nil {
		return nil, nil, err
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("begin a session on %s: %w", Redact(raw), err)
	}
	return conn, sess, nil
}

// BrowseReceiver attaches a browser to queue: its source asks for the
// "copy" distribution mode, so Artemis sends copies and leaves every
// message on the queue (settling a copy changes nothing on the broker).
// The copies come pre-settled, so credit (100) keeps flowing without a
// disposition per message.
func BrowseReceiver(ctx context.Context, s *amqp.Session, queue string) (*amqp.Receiver, error) {
	settled := amqp.SenderSettleModeSettled
	r, err := s.NewReceiver(ctx, queue, &amqp.ReceiverOptions{
		SourceCapabilities:        []string{"queue"},
		SourceDistributionMode:    amqp.SourceDistributionModeCopy,
		RequestedSenderSettleMode: &settled,
		Credit:                    100,
	})
	if err != nil {
		return nil, fmt.Errorf("browse %s: %w", queue, err)
	}
	return r, nil
}

// QueueReceiver attaches a receiver that consumes from queue (the "queue"
// capability, an anycast queue on Artemis). Deliveries come unsettled: each
// stays on the queue until the caller accepts it. credit is the link
// credit go-amqp keeps topped up; -1 leaves credit to the caller's
// IssueCredit calls.
func QueueReceiver(ctx context.Context, s *amqp.Session, queue string, credit int32) (*amqp.Receiver, error) {
	unsettled := amqp.SenderSettleModeUnsettled
	r, err := s.NewReceiver(ctx, queue, &amqp.ReceiverOptions{
		SourceCapabilities:        []string{"queue"},
		RequestedSenderSettleMode: &unsettled,
		Credit:                    credit,
	})
	if err != nil {
		return nil, fmt.Errorf("attach a receiver to %s: %w", queue, err)
	}
	return r, nil
}

// ReceiveOrIdle returns the next delivery on r, or nil (and no error) once
// none has come for idle. AMQP gives no end-of-queue mark, and Artemis does
// not answer go-amqp's drain (it asks with zero credit), so a queue counts
// as read to the end once it has been silent for idle.
func ReceiveOrIdle(ctx context.Context, r *amqp.Receiver, idle time.Duration) (*amqp.Message, error) {
	rctx, cancel := context.WithTimeout(ctx, idle)
	defer cancel()
	msg, err := r.Receive(rctx, nil)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, nil
	}
	return msg, err
}

// Browse returns copies of every message on queue, leaving them all in
// place (see BrowseReceiver); the queue counts as read once nothing has
// come for idle (see ReceiveOrIdle).
func Browse(ctx context.Context, s *amqp.Session, queue string, idle time.Duration) ([]*amqp.Message, error) {
	r, err := BrowseReceiver(ctx, s, queue)
	if err != nil {
		return nil, err
	}
	defer r.Close(context.WithoutCancel(ctx))
	var msgs []*amqp.Message
	for {
		msg, err := ReceiveOrIdle(ctx, r, idle)
		if err != nil {
			return nil, fmt.Errorf("browse %s: %w", queue, err)
		}
		if msg == nil {
			return msgs, nil
		}
		msgs = append(msgs, msg)
	}
}

// BodyText returns a message's body as text: an AMQP value that is a
// string or binary, or else its data sections joined. BabelQueue bodies
// are JSON text; a poison message may be anything.
func BodyText(msg *amqp.Message) string {
	switch v := msg.Value.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	var b strings.Builder
	for _, d := range msg.Data {
		b.Write(d)
	}
	return b.String()
}
