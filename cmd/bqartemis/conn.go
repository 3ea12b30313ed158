package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/babelqueue/babelqueue-go-artemis/internal/redact"
	"github.com/babelqueue/babelqueue-go-artemis/internal/wireprobe"
)

// Environment variables the connection falls back to.
const (
	envURL      = "ARTEMIS_URL"
	envUser     = "ARTEMIS_USER"
	envPassword = "ARTEMIS_PASSWORD"
)

// connFlags are the connection flags every command takes.
type connFlags struct {
	urls          urlList
	user          string
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string
	timeout       time.Duration
	cluster       bool // each -url is a cluster member: run once per member (cluster.go)

	getenv  func(string) string
	secrets redact.Secrets // every password seen, scrubbed from all output
}

// urlList is a repeatable -url flag.
type urlList []string

func (u *urlList) String() string { return strings.Join(*u, ",") }
func (u *urlList) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty URL")
	}
	*u = append(*u, s)
	return nil
}

func (c *connFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	c.getenv = getenv
	fs.Var(&c.urls, "url", "broker `URL` (amqp:// or amqps://), repeatable: a live/backup list tried in order (default $"+envURL+")")
	fs.StringVar(&c.user, "user", "", "SASL PLAIN user (default: the URL's user, else $"+envUser+"); the password comes from the URL or $"+envPassword)
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM `file` of the CA certificates that sign the broker's certificate (amqps://)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM `file` of the client certificate (with -tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM `file` of the client certificate's key (with -tls-cert)")
	fs.StringVar(&c.tlsServerName, "tls-server-name", "", "the `name` the broker's certificate must carry (default: the URL's host)")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "give up after this `duration`")
	fs.BoolVar(&c.cluster, "cluster", false, "each -url is one member of an Artemis cluster: run on every member and report per member (inspect, redrive, remove, peek, stats)")
}

// target is one broker URL as it is dialled and shown.
type target struct {
	addr  string // without userinfo
	shown string // password replaced by xxxxx
	user  string
	pass  string
	tls   bool
}

// targets resolves the URL list and the credentials. Every password is
// remembered for scrubbing before anything can fail. The credentials are
// taken field by field, as the library takes them: the user from -user,
// else the URL's, else $ARTEMIS_USER; the password from the URL, else
// $ARTEMIS_PASSWORD.
func (c *connFlags) targets() ([]target, error) {
	urls := []string(c.urls)
	if len(urls) == 0 {
		if v := strings.TrimSpace(c.getenv(envURL)); v != "" {
			urls = []string{v}
		}
	}
	envPass := c.getenv(envPassword)
	c.secrets.Add(envPass)
	for _, raw := range urls {
		c.secrets.AddURL(raw)
	}
	if len(urls) == 0 {
		return nil, usagef("no broker: give -url or set $%s", envURL)
	}
	var ts []target
	for _, raw := range urls {
		shown := redact.URL(raw)
		u, err := url.Parse(raw)
		if err != nil {
			return nil, usagef("the broker URL %s does not parse (is its userinfo percent-encoded?)", shown)
		}
		if redact.Ambiguous(raw) {
			return nil, usagef("the broker URL %s has an @ that does not end its userinfo: percent-encode @ / ? # %% in it (as %%40 %%2F %%3F %%23 %%25), or set $%s instead", shown, envPassword)
		}
		switch u.Scheme {
		case "amqp", "amqps":
		default:
			return nil, usagef("the broker URL %s: scheme %q, want amqp or amqps", shown, u.Scheme)
		}
		if u.Hostname() == "" {
			return nil, usagef("the broker URL %s has no host", shown)
		}
		t := target{shown: shown, tls: u.Scheme == "amqps"}
		if u.User != nil {
			t.user = u.User.Username()
			t.pass, _ = u.User.Password()
		}
		if c.user != "" {
			t.user = c.user
		}
		if t.user == "" {
			t.user = c.getenv(envUser)
		}
		if t.pass == "" {
			t.pass = envPass
		}
		bare := *u
		bare.User = nil
		t.addr = bare.String()
		ts = append(ts, t)
	}
	if c.tlsWanted() {
		for _, t := range ts {
			if !t.tls {
				return nil, usagef("-tls-* flags need amqps:// URLs, got %s", t.shown)
			}
		}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, usagef("-tls-cert and -tls-key go together")
	}
	return ts, nil
}

func (c *connFlags) tlsWanted() bool {
	return c.tlsCA != "" || c.tlsCert != "" || c.tlsKey != "" || c.tlsServerName != ""
}

func (c *connFlags) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.tlsServerName}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in it", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if c.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// session is one open connection and its session.
type session struct {
	conn   *amqp.Conn
	sess   *amqp.Session
	shown  string             // the URL it is connected to, password redacted
	cancel context.CancelFunc // ends open's timeout; nil from dial
}

// Close closes the connection, waiting for it at most closeTimeout, then
// ends the timeout open set. go-amqp's Conn.Close takes no context: with a
// broker that stops reading it waits out the close frame's write timeout
// (30 s). Past the bound it returns without waiting: the command is
// ending, and the process with it, which drops the connection.
func (s *session) Close() {
	closeWithin(s.conn.Close)
	if s.cancel != nil {
		s.cancel()
	}
}

// closeWithin calls closeConn and waits for it at most closeTimeout; the
// close goes on in the background if the bound expires.
func closeWithin(closeConn func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = closeConn() // the connection is being dropped: its error changes nothing
	}()
	bound := time.NewTimer(closeTimeout)
	defer bound.Stop()
	select {
	case <-done:
	case <-bound.C:
	}
}

// open is a command's start: it dials within -timeout and returns the
// context that carries the timeout with the session. Closing the session
// ends the timeout too.
func (c *connFlags) open(ctx context.Context) (context.Context, *session, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	s, err := c.dial(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	s.cancel = cancel
	return ctx, s, nil
}

// dial connects to the first URL that answers. The error lists each URL
// (redacted) with its cause, scrubbed.
func (c *connFlags) dial(ctx context.Context) (*session, error) {
	ts, err := c.targets()
	if err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if c.tlsWanted() {
		if tlsCfg, err = c.tlsConfig(); err != nil {
			return nil, err
		}
	}
	var errs []string
	for _, t := range ts {
		opts := &amqp.ConnOptions{ContainerID: "bqartemis-" + randomHex(4), TLSConfig: tlsCfg}
		if t.user != "" || t.pass != "" {
			opts.SASLType = amqp.SASLTypePlain(t.user, t.pass)
		}
		dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		conn, err := wireprobe.Guard(dctx, t.addr, func(ctx context.Context) (*amqp.Conn, error) {
			return amqp.Dial(ctx, t.addr, opts)
		})
		if err == nil {
			var sess *amqp.Session
			sess, err = conn.NewSession(dctx, nil)
			if err != nil {
				closeWithin(conn.Close)
				err = fmt.Errorf("begin a session: %w", err)
			} else {
				cancel()
				return &session{conn: conn, sess: sess, shown: t.shown}, nil
			}
		}
		cancel()
		errs = append(errs, t.shown+": "+c.scrub(err.Error()))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.New("cannot connect to any broker: " + strings.Join(errs, "; "))
}

// scrub replaces every known password, in each of its encodings, by
// xxxxx (internal/redact, the library's rules).
func (c *connFlags) scrub(s string) string { return c.secrets.String(s) }
