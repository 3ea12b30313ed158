package testkit

import (
	"context"
	"io"
	"net"
	"net/url"
	"testing"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMustConsumerBuildsTheConsumer(t *testing.T) {
	cons := MustConsumer(t, artemis.Handlers{"urn:babel:testkit:ok": func(context.Context, *artemis.Envelope, *amqp.Message) error {
		return nil
	}}, artemis.WithConcurrency(2))
	assert.NotNil(t, cons)
}

// TestFaultProxyForwardsToTheBrokerPort puts the proxy in front of a local
// echo server standing for the broker: the rewritten URL keeps the
// credentials, names the proxy, and bytes sent through it come back.
func TestFaultProxyForwardsToTheBrokerPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()

	b := &brokertest.Broker{URL: "amqp://babel:pw@" + ln.Addr().String()}
	p, through := FaultProxy(t, b, 7)
	u, err := url.Parse(through)
	require.NoError(t, err)
	assert.Equal(t, p.Addr(), u.Host, "the URL goes through the proxy")
	assert.NotEqual(t, ln.Addr().String(), u.Host)
	assert.Equal(t, "babel", u.User.Username())

	c, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(got))
}
