package artemis

import (
	"context"
)

// Dial connects to the first of urls that answers, trying them in turn (an
// Artemis live/backup pair, for instance), and returns a Client that owns
// the connection. opts may be nil. The URLs are amqp:// or amqps://, with
// optional userinfo credentials. An error never shows a password: each URL
// is printed with its password replaced by xxxxx, and a password quoted by
// go-amqp or the net package is scrubbed. When no URL answers the error
// matches ErrConnect. A connection router's answer, amqp:connection:redirect
// (an Artemis acceptor with router=), is followed: the Client connects to
// the host and port it names, with the same credentials, at most 3 hops. For
// a cluster of several live brokers see DialCluster.
func Dial(ctx context.Context, urls []string, opts *ClientOptions) (*Client, error) {
	c, err := newClient(urls, opts, dialAMQP)
	if err != nil {
		return nil, err
	}
	if _, err := c.connection(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the connection and every link on it, and cuts short a dial
// in flight or a backoff wait between dials: Consume loops return
// ErrClosed, and publishes fail with ErrClosed (those that were waiting
// for the connection with an error that matches both ErrConnect and
// ErrClosed). It waits for no dial. Cancel Consume's context first for a
// graceful stop that lets handlers in flight settle.
func (c *Client) Close() error {
	if c == nil || c.done == nil {
		return nil // a nil or zero Client: nothing was opened
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	c.abort()
	cn := c.cur
	c.cur = nil
	c.mu.Unlock()
	if c.members != nil {
		return c.closeMembers()
	}
	if cn == nil {
		return nil
	}
	if cn.dead() {
		// Its error was reported when it died; Close would only repeat it.
		_ = cn.conn.Close()
		return nil
	}
	return c.red.error(cn.conn.Close())
}
