package integration_test

// Authentication against a real Artemis broker (run when ARTEMIS_URL is
// set): a refused login fails fast with an error that names the broker but
// never the password, and a user who may not send to <queue>.dlq cannot
// lose a message by failing to dead-letter it.
//
// The second case needs the broker's second login, nodlq/nodlq-pw (role
// nodlq: may consume and send everywhere but may not send to *.dlq), which
// scripts/artemis writes on every start. ARTEMIS_NODLQ_USER and
// ARTEMIS_NODLQ_PASSWORD override the credentials for another broker.

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/babelqueue/babelqueue-go-artemis/internal/testkit"
)

const (
	// authWrongPassword is distinctive, so finding it anywhere is a leak.
	authWrongPassword = "s3cr3t-Wrong-PW"
	// authFailFast bounds a refused login. The dial timeout stays at its
	// 15 s default, so meeting this bound means the broker's SASL outcome
	// ended the dial, not a timer.
	authFailFast = 10 * time.Second
	authURN      = "urn:babel:auth:checked"
)

// authEvents records the Client's connection events.
type authEvents struct {
	mu     sync.Mutex
	events []artemis.ConnectionEvent
	ch     chan artemis.ConnectionEvent
}

func newAuthEvents() *authEvents {
	return &authEvents{ch: make(chan artemis.ConnectionEvent, 1024)}
}

func (e *authEvents) on(ev artemis.ConnectionEvent) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
	select {
	case e.ch <- ev:
	default: // the test reads only the first ones
	}
}

func (e *authEvents) all() []artemis.ConnectionEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]artemis.ConnectionEvent(nil), e.events...)
}

// next waits for the next event of kind.
func (e *authEvents) next(t *testing.T, kind artemis.ConnectionEventKind) artemis.ConnectionEvent {
	t.Helper()
	deadline := time.After(arrival)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v event within %v; events: %v", kind, arrival, e.all())
			return artemis.ConnectionEvent{}
		}
	}
}

// TestIntegrationAuthWrongCredentialsFailFast dials with credentials the
// broker refuses, given in each way the Client takes them.
func TestIntegrationAuthWrongCredentialsFailFast(t *testing.T) {
	b := brokertest.Require(t)
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	hostPort := u.Host
	user := u.User.Username()
	bare := "amqp://" + hostPort

	// A password that URL-escaping changes, to check both spellings stay hidden.
	const oddPassword = authWrongPassword + ":@/%"
	cases := []struct {
		name    string
		url     string
		opts    artemis.ClientOptions
		secrets []string // none may appear in any error, event or log line
	}{
		{
			name:    "password in the URL",
			url:     "amqp://" + url.UserPassword(user, authWrongPassword).String() + "@" + hostPort,
			secrets: []string{authWrongPassword},
		},
		{
			name:    "password in ClientOptions",
			url:     bare,
			opts:    artemis.ClientOptions{Username: user, Password: authWrongPassword},
			secrets: []string{authWrongPassword},
		},
		{
			name: "ClientOptions win over a right password in the URL",
			url:  b.URL,
			opts: artemis.ClientOptions{Username: user, Password: authWrongPassword},
			// The URL's own (right) password is hidden too.
			secrets: []string{authWrongPassword},
		},
		{
			name:    "unknown user",
			url:     "amqp://" + url.UserPassword("bq-no-such-user", authWrongPassword).String() + "@" + hostPort,
			secrets: []string{authWrongPassword},
		},
		{
			name:    "password that URL-escaping changes",
			url:     "amqp://" + url.UserPassword(user, oddPassword).String() + "@" + hostPort,
			secrets: []string{oddPassword, url.UserPassword("", oddPassword).String()[1:]},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events := newAuthEvents()
			var logs fakelink.LogBuffer
			opts := tc.opts
			opts.OnEvent = events.on
			opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx, cancel := context.WithTimeout(context.Background(), 3*authFailFast)
			defer cancel()

			start := time.Now()
			c, err := artemis.Dial(ctx, []string{tc.url}, &opts)
			elapsed := time.Since(start)
			if c != nil {
				_ = c.Close(context.Background())
			}
			require.Error(t, err, "the broker must refuse the login")
			t.Logf("refused in %v: %v", elapsed.Round(time.Millisecond), err)

			assert.Less(t, elapsed, authFailFast, "a refused login fails fast, not at the dial timeout")
			assert.ErrorIs(t, err, artemis.ErrConnect)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "refused by the broker, not timed out")
			msg := err.Error()
			assert.Contains(t, msg, hostPort, "the error names the broker")
			assert.Regexp(t, regexp.MustCompile(`(?i)sasl|auth`), msg, "the error says the login was refused")

			evs := events.all()
			require.NotEmpty(t, evs, "the failed dial is reported through OnEvent")
			assert.Equal(t, artemis.EventDialFailed, evs[0].Kind)
			assert.Contains(t, evs[0].URL, hostPort)
			require.Error(t, evs[0].Err)

			texts := map[string]string{"error": msg, "log": logs.String()}
			for _, ev := range evs {
				texts["event "+ev.Kind.String()+" URL"] = ev.URL
				if ev.Err != nil {
					texts["event "+ev.Kind.String()+" error"] = ev.Err.Error()
				}
			}
			assert.NotEmpty(t, texts["log"], "the dial failure is logged")
			for where, text := range texts {
				for _, secret := range tc.secrets {
					assert.NotContains(t, text, secret, "%s shows the password", where)
				}
			}
			// No error in the chain may show it either (errors.As could reach it).
			for e := range errorChain(err) {
				for _, secret := range tc.secrets {
					assert.NotContains(t, e.Error(), secret, "an error in the chain (%T) shows the password", e)
				}
			}
		})
	}
}

// errorChain walks err's tree.
func errorChain(err error) func(yield func(error) bool) {
	return func(yield func(error) bool) {
		var walk func(error) bool
		walk = func(e error) bool {
			if e == nil {
				return true
			}
			if !yield(e) {
				return false
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				return walk(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					if !walk(x) {
						return false
					}
				}
			}
			return true
		}
		walk(err)
	}
}

// authNoDLQUser returns the credentials of the user without send
// permission on dead-letter queues, after checking the broker knows it.
func authNoDLQUser(t *testing.T, b *brokertest.Broker) (user, password string) {
	t.Helper()
	user, password = os.Getenv("ARTEMIS_NODLQ_USER"), os.Getenv("ARTEMIS_NODLQ_PASSWORD")
	if user == "" {
		user, password = "nodlq", "nodlq-pw"
	}
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	conn, err := amqp.Dial(ctx, "amqp://"+u.Host, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(user, password)})
	if err == nil {
		_ = conn.Close()
		return user, password
	}
	// An instance started before scripts/artemis set up this user gets it
	// on its next start; CI always starts a fresh one.
	if os.Getenv("CI") != "true" && !authInstanceHasUser(b, user) {
		t.Skipf("the broker refuses user %q (%v): it was started before scripts/artemis added that user; "+
			"restart it (scripts/artemis stop && scripts/artemis start) to run this test", user, err)
	}
	t.Fatalf("the broker refuses user %q: %v (scripts/artemis start should have set it up)", user, err)
	return "", ""
}

// authInstanceHasUser reports whether the local instance's users file
// (ARTEMIS_INSTANCE_DIR) lists user.
func authInstanceHasUser(b *brokertest.Broker, user string) bool {
	if b.InstanceDir == "" {
		return false
	}
	data, err := os.ReadFile(filepath.Join(b.InstanceDir, "etc", "artemis-users.properties"))
	if err != nil {
		return false
	}
	return regexp.MustCompile(`(?m)^[ \t]*` + regexp.QuoteMeta(user) + `[ \t]*[=:]`).Match(data)
}

// authDial connects a Client as user; it is closed when the test ends.
func authDial(t *testing.T, b *brokertest.Broker, user, password string, events *authEvents) *artemis.Client {
	t.Helper()
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	c, err := artemis.Dial(ctx, []string{"amqp://" + u.Host}, &artemis.ClientOptions{
		Username: user,
		Password: password,
		OnEvent:  events.on,
		// Quick re-attach attempts, so a refused one is seen repeating.
		Backoff: &artemis.Backoff{Initial: 50 * time.Millisecond, Max: 400 * time.Millisecond, Multiplier: 2},
	})
	require.NoError(t, err, "dial as %s", user)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// authHandled is one handler call.
type authHandled struct {
	id            string
	deliveryCount uint32
}

// authFailure is the handler's error, with a type of its own.
type authFailure struct{}

func (*authFailure) Error() string { return "order service unavailable" }

// TestIntegrationAuthDeadLetterWithoutSendPermission consumes as a user
// who may consume from the queue but may not send to <queue>.dlq. Artemis
// refuses that in two ways, and neither loses the message:
//
//   - a sender link attached to <queue>.dlq is refused at attach
//     (amqp:unauthorized-access, "AMQ119017: not authorized to create
//     producer"): Client.Consume attaches its dead-letter sender before it
//     listens, so it reports the refusal through OnEvent, retries with
//     backoff and never takes the message;
//   - on an anonymous link (target set per message) the attach succeeds and
//     each dead-letter transfer is rejected (amqp:unauthorized-access,
//     "AMQ229032: ... does not have permission='SEND'"): the consumer
//     reports ErrDeadLetterFailed and releases the source, which comes back
//     uncounted.
func TestIntegrationAuthDeadLetterWithoutSendPermission(t *testing.T) {
	b := brokertest.Require(t)
	user, password := authNoDLQUser(t, b)

	t.Run("dead-letter transfer rejected", func(t *testing.T) {
		admin := b.Dial(t)
		q := brokertest.Queue(t)
		pub := artemis.NewPublisher(admin.NewSender(q), q)
		env, _ := publishEnvelope(t, pub, q, authURN)

		// The consumer's own dead-letter sender: an anonymous link on a
		// connection of the same user; copies carry to = <queue>.dlq.
		u, err := url.Parse(b.URL)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
		defer cancel()
		dlqConn, err := amqp.Dial(ctx, "amqp://"+u.Host, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(user, password)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = dlqConn.Close() })
		dlqSess, err := dlqConn.NewSession(ctx, nil)
		require.NoError(t, err)
		anon, err := dlqSess.NewSender(ctx, "", &amqp.SenderOptions{SettlementMode: amqp.SenderSettleModeUnsettled.Ptr()})
		require.NoError(t, err, "an anonymous link attaches whatever the user may send to")

		handled := make(chan authHandled, 16)
		errs := newErrorLog()
		cons := testkit.MustConsumer(t, artemis.Handlers{authURN: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
			handled <- authHandled{env.Meta.ID, msg.Header.DeliveryCount}
			return &authFailure{}
		}},
			artemis.WithMaxTries(1), // every failure is at the limit: dead-letter at once
			artemis.WithDeadLetterSender(anon),
			artemis.WithDeadLetterRetryDelay(200*time.Millisecond),
			artemis.WithOnError(errs.onError), artemis.WithCredit(1))

		events := newAuthEvents()
		c := authDial(t, b, user, password, events)
		stop := testkit.ConsumeInBackground(t, c, q, cons, arrival)

		for i := range 2 {
			h := nextAuthHandled(t, handled)
			assert.Equal(t, env.Meta.ID, h.id, "delivery %d is the published message", i)
			// The plain release does not count: Artemis's delivery-count
			// stays 0, so the message never nears max-delivery-attempts.
			assert.Zero(t, h.deliveryCount, "delivery %d: delivery-count after plain releases", i)

			de := errs.next(t)
			require.ErrorIs(t, de, artemis.ErrDeadLetterFailed, "delivery %d", i)
			assert.Equal(t, artemis.DispositionReleased, de.Disposition)
			assert.Equal(t, env.Meta.ID, de.MessageID)
			assert.ErrorIs(t, de, artemis.ErrNotAccepted, "the broker's outcome was not accepted")
			var oe *artemis.OutcomeError
			require.ErrorAs(t, de, &oe)
			rejected, ok := oe.State.(*amqp.StateRejected)
			require.True(t, ok, "outcome %T, want rejected", oe.State)
			require.NotNil(t, rejected.Error)
			assert.Equal(t, amqp.ErrCondUnauthorizedAccess, rejected.Error.Condition)
			var ae *amqp.Error
			require.ErrorAs(t, de, &ae, "the broker's *amqp.Error is reachable")
			assert.Equal(t, amqp.ErrCondUnauthorizedAccess, ae.Condition)
			assert.Contains(t, ae.Description, "SEND", "Artemis names the missing permission")
			var af *authFailure
			assert.ErrorAs(t, de, &af, "the handler's failure stays in the chain")
		}
		stop()

		// The message is still on its queue, uncounted; nothing reached the DLQ.
		left := admin.Drain(q, "")
		require.Len(t, left, 1, "the source message is still on %s", q)
		assert.Equal(t, env.Meta.ID, left[0].Properties.MessageID)
		assert.Zero(t, left[0].Header.DeliveryCount)
		assert.Empty(t, admin.Drain(q+".dlq", ""), "nothing on the dead-letter queue")
		for _, ev := range events.all() {
			assert.NotEqual(t, artemis.EventBackoff, ev.Kind, "the consume loop itself never failed: %v", ev)
		}
	})

	t.Run("dead-letter attach refused", func(t *testing.T) {
		admin := b.Dial(t)
		q := brokertest.Queue(t)
		pub := artemis.NewPublisher(admin.NewSender(q), q)
		env, _ := publishEnvelope(t, pub, q, authURN)

		handled := make(chan authHandled, 16)
		errs := newErrorLog()
		cons := testkit.MustConsumer(t, artemis.Handlers{authURN: func(_ context.Context, env *artemis.Envelope, msg *amqp.Message) error {
			handled <- authHandled{env.Meta.ID, msg.Header.DeliveryCount}
			return &authFailure{}
		}}, artemis.WithMaxTries(1), artemis.WithOnError(errs.onError), artemis.WithCredit(1))

		events := newAuthEvents()
		c := authDial(t, b, user, password, events)
		stop := testkit.ConsumeInBackground(t, c, q, cons, arrival)

		// Consume attaches <queue>.dlq itself; the broker refuses it, and
		// Consume keeps trying: three refusals in a row.
		for i := range 3 {
			ev := events.next(t, artemis.EventBackoff)
			assert.Equal(t, q, ev.Address)
			assert.Equal(t, i+1, ev.Attempt, "backoff attempts grow while the refusal lasts")
			var ae *amqp.Error
			require.ErrorAs(t, ev.Err, &ae, "attempt %d: the broker's *amqp.Error is reachable: %v", i+1, ev.Err)
			assert.Equal(t, amqp.ErrCondUnauthorizedAccess, ae.Condition)
			assert.Contains(t, ev.Err.Error(), q+".dlq", "the error names the refused address")
			assert.NotContains(t, ev.Err.Error(), password)
		}
		stop()

		select {
		case h := <-handled:
			t.Errorf("the handler ran without a dead-letter queue to fall back on: %+v", h)
		default:
		}
		errs.none(t)
		for _, ev := range events.all() {
			assert.NotEqual(t, artemis.EventConsumerAttached, ev.Kind, "Consume never listened: %v", ev)
		}
		// Every refused attempt detached the receiver again: the message is
		// back on the queue, not counted as delivered.
		left := admin.Drain(q, "")
		require.Len(t, left, 1, "the source message is still on %s", q)
		assert.Equal(t, env.Meta.ID, left[0].Properties.MessageID)
		assert.Zero(t, left[0].Header.DeliveryCount, "the refused attempts did not count toward max-delivery-attempts")
	})
}

func nextAuthHandled(t *testing.T, ch <-chan authHandled) authHandled {
	t.Helper()
	select {
	case h := <-ch:
		return h
	case <-time.After(arrival):
		t.Fatalf("the handler was not called within %v", arrival)
		return authHandled{}
	}
}
