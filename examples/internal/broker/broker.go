// Package broker is what the examples share to reach Artemis: in start.go
// the start-up every example's main shares (the broker URL from the
// environment, -queue and -timeout, the run-until-Ctrl-C frame); here a
// plain go-amqp connection for the examples that work below the library's
// Client (putting a raw message on a queue, browsing dead-letter records,
// with the links of the library's internal/queuelink) and a message's body
// as text; in client.go the Client and a background consumer.
package broker

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
)

// Redact returns raw with its password replaced by xxxxx, for printing,
// and its user too when it is the password (amqp://xxxxx:xxxxx@host), as
// the library and bqartemis show a URL.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a broker URL that does not parse)"
	}
	if pass, ok := u.User.Password(); ok && pass != "" && pass == u.User.Username() {
		u.User = url.UserPassword("xxxxx", "xxxxx")
		return u.String()
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
