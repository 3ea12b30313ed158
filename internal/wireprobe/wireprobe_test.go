package wireprobe

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// server accepts on loopback and runs serve on each connection until the
// test ends.
func server(t *testing.T, l net.Listener, serve func(net.Conn)) string {
	t.Helper()
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return l.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// hold reads what comes and never answers, as Artemis does with the other
// transport's opening, until the peer goes.
func hold(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

// tlsPort is a TLS acceptor that, like Artemis's, stays silent when given
// plain AMQP (the TLS layer waits for a record that never comes).
func tlsPort(t *testing.T) string {
	cert := httptest.NewUnstartedServer(nil)
	cert.StartTLS()
	certs := cert.TLS.Certificates
	cert.Close()
	return server(t, listen(t), func(c net.Conn) {
		first := make([]byte, 1)
		if _, err := io.ReadFull(c, first); err != nil || first[0] != 0x16 {
			hold(c)
			return
		}
		tc := tls.Server(&prefixed{Conn: c, first: first}, &tls.Config{Certificates: certs})
		_ = tc.Handshake()
		hold(tc)
	})
}

// plainPort is an AMQP acceptor: it answers the AMQP header with its own
// and stays silent on anything else.
func plainPort(t *testing.T) string {
	return server(t, listen(t), func(c net.Conn) {
		h := make([]byte, 8)
		if _, err := io.ReadFull(c, h); err != nil || string(h[:4]) != "AMQP" {
			hold(c)
			return
		}
		_, _ = c.Write(h)
		hold(c)
	})
}

type prefixed struct {
	net.Conn
	first []byte
}

func (p *prefixed) Read(b []byte) (int, error) {
	if len(p.first) > 0 {
		n := copy(b, p.first)
		p.first = p.first[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// stalled is a dial that only ends with its context, as go-amqp's does on
// a mismatched port.
func stalled(ctx context.Context) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

func TestGuardEndsAMismatchedDialAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, url, want string
	}{
		{"plain AMQP to a TLS port", "amqp://" + tlsPort(t), "answered the TLS handshake: it is a TLS acceptor; dial it with amqps://"},
		{"TLS to a plain port", "amqps://" + plainPort(t), "answered in plain AMQP, not TLS: it is a plain acceptor; dial it with amqp://"},
		{"amqp+ssl to a plain port", "amqp+ssl://" + plainPort(t), "dial it with amqp://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err := Guard(ctx, tc.url, stalled)
			took := time.Since(start)
			if !errors.Is(err, ErrWrongTransport) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("after %v: %v, want %q", took, err, tc.want)
			}
			if took > 2*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
}

// TestGuardConcludesOnlyFromAnAnswer: a matching dial's result is
// returned as it is, and a port that answers nothing (a slow or stalled
// broker) is never called the wrong kind: the dial's own error stands.
func TestGuardConcludesOnlyFromAnAnswer(t *testing.T) {
	silent := server(t, listen(t), hold)
	for _, tc := range []struct{ name, url string }{
		{"plain dial, plain port", "amqp://" + plainPort(t)},
		{"TLS dial, TLS port", "amqps://" + tlsPort(t)},
		{"plain dial, silent port", "amqp://" + silent},
		{"TLS dial, silent port", "amqps://" + silent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), Delay+time.Second)
			defer cancel()
			_, err := Guard(ctx, tc.url, stalled)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v, want the dial's own deadline", err)
			}
		})
	}
	got, err := Guard(context.Background(), "amqp://"+silent, func(context.Context) (string, error) { return "conn", nil })
	if got != "conn" || err != nil {
		t.Errorf("a dial that succeeds: %q, %v", got, err)
	}
	if _, err := Guard(context.Background(), "bogus", func(context.Context) (string, error) { return "", errors.New("bad URL") }); err == nil || err.Error() != "bad URL" {
		t.Errorf("an unknown URL: %v", err)
	}
}
