// Package brokertest is the local-broker harness of the integration tests:
// it reads the broker's settings from the environment (what
// `scripts/artemis env` prints), dials go-amqp with SASL PLAIN, hands out
// fresh queue names, attaches senders and receivers with the "queue"
// capability, drains queues, and runs the Artemis CLI (a real JMS client).
//
// Every blocking call is bounded by a timeout, and everything it opens is
// closed when the test ends.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// The environment variables `scripts/artemis env` prints.
const (
	EnvURL         = "ARTEMIS_URL"
	EnvCoreURL     = "ARTEMIS_CORE_URL"
	EnvHome        = "ARTEMIS_HOME"
	EnvInstanceDir = "ARTEMIS_INSTANCE_DIR"
	EnvUser        = "ARTEMIS_USER"
	EnvPassword    = "ARTEMIS_PASSWORD"
)

// OpTimeout bounds one broker operation (dial, attach, send, settle,
// close). It is generous: the test machine is small and shared.
const OpTimeout = 20 * time.Second

// Broker is a running Artemis broker, as the environment describes it.
type Broker struct {
	URL         string // amqp://user:pass@host:port
	CoreURL     string // tcp://host:port, for the CLI
	Home        string
	InstanceDir string
	User        string
	Password    string
}

// FromEnv reads the broker's settings. ok is false when ARTEMIS_URL is not
// set.
func FromEnv() (b *Broker, ok bool) {
	b = &Broker{
		URL:         os.Getenv(EnvURL),
		CoreURL:     os.Getenv(EnvCoreURL),
		Home:        os.Getenv(EnvHome),
		InstanceDir: os.Getenv(EnvInstanceDir),
		User:        os.Getenv(EnvUser),
		Password:    os.Getenv(EnvPassword),
	}
	return b, b.URL != ""
}

// Require returns the broker, or skips the test when ARTEMIS_URL is not set.
func Require(t testing.TB) *Broker {
	t.Helper()
	b, ok := FromEnv()
	if !ok {
		t.Skip("integration test skipped: ARTEMIS_URL is not set; run scripts/test, " +
			`or start a broker with eval "$(scripts/artemis start)", which exports the ARTEMIS_* variables`)
	}
	return b
}

// dialOptions splits the URL's credentials off into SASL PLAIN. The
// environment's ARTEMIS_USER/ARTEMIS_PASSWORD are used when the URL has none.
func (b *Broker) dialOptions() (addr string, opts *amqp.ConnOptions, err error) {
	u, err := url.Parse(b.URL)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", EnvURL, err)
	}
	user, pass := b.User, b.Password
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
		u.User = nil
	}
	opts = &amqp.ConnOptions{ContainerID: "bqtest-" + randomHex(4)}
	if user != "" {
		opts.SASLType = amqp.SASLTypePlain(user, pass)
	}
	return u.String(), opts, nil
}

// Conn is one AMQP connection with one session.
type Conn struct {
	t       testing.TB
	Conn    *amqp.Conn
	Session *amqp.Session
	senders map[string]*amqp.Sender
}

// Dial connects to the broker with SASL PLAIN and begins a session. The
// connection is closed when the test ends.
func (b *Broker) Dial(t testing.TB) *Conn {
	t.Helper()
	addr, opts, err := b.dialOptions()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	conn, err := amqp.Dial(ctx, addr, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("begin a session: %v", err)
	}
	return &Conn{t: t, Conn: conn, Session: sess, senders: make(map[string]*amqp.Sender)}
}

// NewSender attaches a sender to addr with the "queue" capability, so
// Artemis auto-creates an anycast queue. Transfers are sent unsettled, so
// every one gets the broker's outcome.
func (c *Conn) NewSender(addr string) *amqp.Sender {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	s, err := queuelink.Sender(ctx, c.Session, addr)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// ReceiverOptions configures NewReceiver.
type ReceiverOptions struct {
	// Credit is the link credit: how many unsettled messages the broker
	// may hand out at once (default 1).
	Credit int32
	// Selector is a JMS selector (Artemis filters the queue with it).
	Selector string
}

// NewReceiver attaches a receiver to addr with the "queue" capability and
// manual settlement: nothing is settled unless the test (or the consumer)
// settles it.
func (c *Conn) NewReceiver(addr string, opts *ReceiverOptions) *amqp.Receiver {
	c.t.Helper()
	if opts == nil {
		opts = &ReceiverOptions{}
	}
	ro := &amqp.ReceiverOptions{
		SourceCapabilities: []string{"queue"},
		Credit:             opts.Credit,
	}
	if opts.Selector != "" {
		ro.Filters = []amqp.LinkFilter{amqp.NewSelectorFilter(opts.Selector)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	sess := c.Session
	for attempt := 1; ; attempt++ {
		r, err := sess.NewReceiver(ctx, addr, ro)
		if err == nil {
			return r
		}
		// Artemis 2.40 now and then refuses the attach of a link that takes
		// the handle of one just detached on the same session, with an
		// internal error from its AMQP engine ("TransportLink ... is
		// null"); the same attach a moment later, or on another session,
		// succeeds. That is the broker's, not what a test checks: try
		// again, on a new session of the same connection from the second
		// try on (no handle of it was ever used), four times at most.
		var ae *amqp.Error
		if attempt < 5 && errors.As(err, &ae) && ae.Condition == amqp.ErrCondInternalError {
			c.t.Logf("attach a receiver to %s: %v (the broker's; trying again)", addr, err)
			time.Sleep(100 * time.Millisecond)
			if fresh, serr := c.Conn.NewSession(ctx, nil); serr == nil {
				sess = fresh
			}
			continue
		}
		c.t.Fatalf("attach a receiver to %s: %v", addr, err)
		return nil
	}
}

// Send sends msg to addr (on a sender attached on first use) and fails the
// test unless the broker accepted it.
func (c *Conn) Send(addr string, msg *amqp.Message) {
	c.t.Helper()
	s := c.senders[addr]
	if s == nil {
		s = c.NewSender(addr)
		c.senders[addr] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	if err := queuelink.SendAccepted(ctx, s, msg); err != nil {
		c.t.Fatalf("send to %s: %v", addr, err)
	}
}

// Receive waits up to timeout for the next message on r; it returns nil
// when none arrives in time. The message is not settled.
func (c *Conn) Receive(r *amqp.Receiver, timeout time.Duration) *amqp.Message {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	msg, err := r.Receive(ctx, nil)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		c.t.Fatalf("receive from %s: %v", r.Address(), err)
	}
	return msg
}

// Accept accepts msg on r, failing the test if the disposition fails.
func (c *Conn) Accept(r *amqp.Receiver, msg *amqp.Message) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	if err := r.AcceptMessage(ctx, msg); err != nil {
		c.t.Fatalf("accept on %s: %v", r.Address(), err)
	}
}

// CloseReceiver detaches r; the broker puts back what it had handed out
// and was not settled.
func (c *Conn) CloseReceiver(r *amqp.Receiver) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), OpTimeout)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		c.t.Fatalf("close the receiver on %s: %v", r.Address(), err)
	}
}

// DrainIdle is how long Drain waits for one more message before it
// decides the queue is empty.
const DrainIdle = 1500 * time.Millisecond

// Drain consumes (accepts) every message on addr that matches selector
// ("" for all) until none arrives for DrainIdle, and returns them in
// order. Messages held unsettled by another link are not seen: close that
// link first.
func (c *Conn) Drain(addr, selector string) []*amqp.Message {
	c.t.Helper()
	r := c.NewReceiver(addr, &ReceiverOptions{Credit: 100, Selector: selector})
	defer c.CloseReceiver(r)
	var got []*amqp.Message
	for {
		msg := c.Receive(r, DrainIdle)
		if msg == nil {
			return got
		}
		c.Accept(r, msg)
		got = append(got, msg)
	}
}

// Queue returns a fresh queue name for the test: bqtest.<test>.<random>.
func Queue(t testing.TB) string {
	return "bqtest." + nameOf(t) + "." + randomHex(4)
}

// TinyDLQ returns a fresh bqtest.tinydlq.<random> address. The broker's
// address-setting for bqtest.tinydlq.# (max-size-bytes 1, address-full-policy
// FAIL) makes such an address refuse every send once it holds a message.
func TinyDLQ() string {
	return "bqtest.tinydlq." + randomHex(4)
}

// nameOf turns the test's name into an address segment: lowercase letters,
// digits and dashes, without the TestIntegration (or Test) prefix.
func nameOf(t testing.TB) string {
	name := t.Name()
	if n, ok := strings.CutPrefix(name, "TestIntegration"); ok {
		name = n
	} else {
		name = strings.TrimPrefix(name, "Test")
	}
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 40 {
		s = s[:40]
	}
	if s == "" || s == "tinydlq" {
		s = "t"
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
