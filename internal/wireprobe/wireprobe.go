// Package wireprobe makes a dial to the wrong kind of broker port fail at
// once. Artemis answers neither mismatch: a TLS acceptor given the plain
// AMQP header reads it as the start of a long record and waits for the
// rest, and a plain acceptor given a TLS ClientHello waits too, each until
// its handshake timeout, so a client would wait out its whole dial
// timeout. Both kinds of port answer their own opening at once, though:
// Guard, when the dial has not finished after a short while, opens a
// second connection with the other transport's opening, and when the port
// answers it, it ends the dial with an error that says what to use. The
// probe only ever concludes from an answer, never from a silence, so a
// slow broker is never mistaken for the wrong kind.
package wireprobe

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"
)

// Delay is how long a dial runs before the probe starts: a healthy dial on
// loopback is done by then and costs nothing more.
const Delay = 200 * time.Millisecond

// ErrWrongTransport is the cause when the port speaks the other transport.
var ErrWrongTransport = errors.New("the port speaks the other transport")

// amqpHeader is the SASL protocol header a plain AMQP client opens with.
var amqpHeader = []byte("AMQP\x03\x01\x00\x00")

// Guard runs dial with a context Guard may cancel, and, once Delay passed
// without dial returning, probes addr (the broker URL, no userinfo needed)
// with the transport its scheme does not ask for. When the probe hears
// that transport's answer, dial's context ends and Guard returns an error
// matching ErrWrongTransport that names the host and port (never the
// userinfo) and the scheme to use. Otherwise it returns what dial did.
func Guard[C any](ctx context.Context, addr string, dial func(context.Context) (C, error)) (C, error) {
	wantTLS, hostport, ok := target(addr)
	if !ok {
		return dial(ctx)
	}
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pctx, stop := context.WithCancel(dctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		t := time.NewTimer(Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-pctx.Done():
			return
		}
		if err := probe(pctx, hostport, wantTLS); err != nil {
			cancel(err)
		}
	}()
	c, err := dial(dctx)
	stop()
	<-probed
	if cause := context.Cause(dctx); err != nil && errors.Is(cause, ErrWrongTransport) {
		return c, cause
	}
	return c, err
}

// target reads the URL's scheme and address; ok is false for a URL this
// package does not know (the dial then reports it).
func target(addr string) (wantTLS bool, hostport string, ok bool) {
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return false, "", false
	}
	port := "5672"
	switch u.Scheme {
	case "amqp":
	case "amqps", "amqp+ssl":
		wantTLS, port = true, "5671"
	default:
		return false, "", false
	}
	if u.Port() != "" {
		port = u.Port()
	}
	return wantTLS, net.JoinHostPort(u.Hostname(), port), true
}

// probe returns an error when hostport answers the transport the dial
// does not use; nil when it does not answer it (in time).
func probe(ctx context.Context, hostport string, wantTLS bool) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return nil
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if wantTLS {
		if speaksPlainAMQP(conn) {
			return fmt.Errorf("%w: %s answered in plain AMQP, not TLS: it is a plain acceptor; dial it with amqp://, or use the broker's TLS port", ErrWrongTransport, hostport)
		}
		return nil
	}
	if speaksTLS(conn) {
		return fmt.Errorf("%w: %s answered the TLS handshake: it is a TLS acceptor; dial it with amqps://, or use the broker's plain AMQP port", ErrWrongTransport, hostport)
	}
	return nil
}

// speaksPlainAMQP sends the AMQP header and reports whether the peer
// answers with one.
func speaksPlainAMQP(conn net.Conn) bool {
	if _, err := conn.Write(amqpHeader); err != nil {
		return false
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(conn, got); err != nil {
		return false
	}
	return bytes.Equal(got, amqpHeader[:4])
}

// speaksTLS opens a TLS handshake and reports whether the peer answers in
// TLS: its first bytes are a TLS record header (a handshake or an alert).
// The certificate is not checked: nothing is sent over this connection,
// it only tells a TLS port from another.
func speaksTLS(conn net.Conn) bool {
	rc := &firstBytes{Conn: conn}
	tc := tls.Client(rc, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe: no data is sent, only the kind of port is learnt
	_ = tc.Handshake()
	b := rc.got
	return len(b) >= 2 && (b[0] == 0x16 || b[0] == 0x15) && b[1] == 0x03
}

// firstBytes keeps the first bytes read from its connection.
type firstBytes struct {
	net.Conn
	got []byte
}

func (f *firstBytes) Read(p []byte) (int, error) {
	n, err := f.Conn.Read(p)
	if len(f.got) < 2 {
		f.got = append(f.got, p[:min(n, 2-len(f.got))]...)
	}
	return n, err
}
