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
	secrets []string // every password seen, scrubbed from all output
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
	fs.BoolVar(&c.cluster, "cluster", false, "each -url is one member of an Artemis cluster: run on every member and report per member (inspect, redrive, peek, stats)")
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
// remembered for scrubbing before anything can fail.
func (c *connFlags) targets() ([]target, error) {
	urls := []string(c.urls)
	if len(urls) == 0 {
		if v := strings.TrimSpace(c.getenv(envURL)); v != "" {
			urls = []string{v}
		}
	}
	envPass := c.getenv(envPassword)
	c.addSecret(envPass)
	for _, raw := range urls {
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			p, _ := u.User.Password()
			c.addSecret(p)
		} else if err != nil {
			c.addRawURLSecret(raw)
		}
	}
	if len(urls) == 0 {
		return nil, usagef("no broker: give -url or set $%s", envURL)
	}
	var ts []target
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, usagef("the broker URL %s does not parse", c.scrub(raw))
		}
		switch u.Scheme {
		case "amqp", "amqps":
		default:
			return nil, usagef("the broker URL %s: scheme %q, want amqp or amqps", u.Redacted(), u.Scheme)
		}
		if u.Hostname() == "" {
			return nil, usagef("the broker URL %s has no host", u.Redacted())
		}
		t := target{shown: u.Redacted(), tls: u.Scheme == "amqps"}
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

// Close closes the connection, then ends the timeout open set.
func (s *session) Close() {
	_ = s.conn.Close()
	if s.cancel != nil {
		s.cancel()
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
		conn, err := amqp.Dial(dctx, t.addr, opts)
		if err == nil {
			var sess *amqp.Session
			sess, err = conn.NewSession(dctx, nil)
			if err != nil {
				_ = conn.Close()
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

func (c *connFlags) addSecret(s string) {
	if s == "" {
		return
	}
	for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s), (&url.URL{User: url.UserPassword("", s)}).String()[3:]} {
		form = strings.TrimPrefix(form, ":")
		form = strings.TrimSuffix(form, "@")
		if form != "" && !contains(c.secrets, form) {
			c.secrets = append(c.secrets, form)
		}
	}
}

// addRawURLSecret remembers the password of a URL that does not parse:
// whatever sits between the scheme's user: and the last @.
func (c *connFlags) addRawURLSecret(raw string) {
	rest := raw
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return
	}
	if colon := strings.Index(rest[:at], ":"); colon >= 0 {
		c.addSecret(rest[colon+1 : at])
		if p, err := url.PathUnescape(rest[colon+1 : at]); err == nil {
			c.addSecret(p)
		}
	}
}

// scrub replaces every known password, in each of its encodings, by xxxxx.
// Longer secrets go first, so one that contains another is masked whole.
func (c *connFlags) scrub(s string) string {
	secrets := append([]string(nil), c.secrets...)
	for i := 1; i < len(secrets); i++ {
		for j := i; j > 0 && len(secrets[j]) > len(secrets[j-1]); j-- {
			secrets[j], secrets[j-1] = secrets[j-1], secrets[j]
		}
	}
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
