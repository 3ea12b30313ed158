package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/Azure/go-amqp"
)

// broker dials one connection with SASL PLAIN from the URL's credentials.
type broker struct {
	addr string
	opts amqp.ConnOptions
}

func newBroker(raw string) (*broker, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("broker URL: %w", err)
	}
	b := &broker{opts: amqp.ConnOptions{ContainerID: "babelqueue-bench"}}
	if u.User != nil {
		pass, _ := u.User.Password()
		b.opts.SASLType = amqp.SASLTypePlain(u.User.Username(), pass)
		u.User = nil
	}
	b.addr = u.String()
	return b, nil
}

func (b *broker) dial(ctx context.Context) (*amqp.Conn, *amqp.Session, error) {
	opts := b.opts
	conn, err := amqp.Dial(ctx, b.addr, &opts)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", b.addr, err)
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("begin a session: %w", err)
	}
	return conn, sess, nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = url.User(u.User.Username())
	return u.String()
}
