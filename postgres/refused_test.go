package postgres

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// A row whose queue the broker refuses at the attach (the user may not
// send to it: amqp:unauthorized-access; no such address with auto-create
// off: amqp:not-found) counts that refusal as the row's failure: it is
// parked after MaxAttempts, its last_error and the round's RelayEvent name
// the condition, and the other rows and queues go out meanwhile. A full
// address (a refused transfer) is parked the same way.
//
// The relay logs in as the broker's user nodlq (scripts/artemis), which may
// not send to *.dlq; auto-create is turned off for the not-found queue
// through the broker's management address.
func TestOutboxRowOfARefusedQueueIsParked(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	forbidden := queue + ".dlq"
	missing := "bqpg.nocreate." + token() + ".orders"
	full := "bqtest.tinydlq." + token()
	disableAutoCreate(t, amqpURL, "bqpg.nocreate.#")

	ids := map[string][]string{}
	add := func(kind, q string, n int, group string) {
		ids[kind] = append(ids[kind], writeRows(t, db, q, n, group)...)
	}
	add("forbidden", forbidden, 1, "")
	add("missing", missing, 1, "")
	add("forbidden", forbidden, 1, "tenant-3")
	add("held", queue, 1, "tenant-3")
	add("good", queue, 2, "")
	add("fits", full, 1, "")
	add("full", full, 1, "")
	add("good", queue, 3, "")

	const maxAttempts = 3
	obs := &roundRecorder{}
	client := dial(t, noDLQURL(t, amqpURL))
	relay := NewRelay(db.pool, client, &RelayOptions{MaxAttempts: maxAttempts, Backoff: func(int) time.Duration { return 0 }, Observer: obs})
	t.Cleanup(func() { _ = relay.Close(context.Background()) })
	var roundErrs []error
	for range 5 {
		if _, err := relay.RelayOnce(context.Background()); err != nil {
			roundErrs = append(roundErrs, err)
		}
	}

	state := func(kind string) (published, parked, attempts int, last string) {
		for _, id := range ids[kind] {
			var p, k bool
			var a int
			var l *string
			require.NoError(t, db.pool.QueryRow(context.Background(),
				"SELECT published_at IS NOT NULL, parked_at IS NOT NULL, attempts, last_error FROM babelqueue_outbox WHERE message_id = $1", id).
				Scan(&p, &k, &a, &l))
			if p {
				published++
			}
			if k {
				parked++
			}
			attempts = max(attempts, a)
			if l != nil {
				last = *l
			}
		}
		return published, parked, attempts, last
	}
	goodOut, _, _, _ := state("good")
	fitsOut, _, _, _ := state("fits")
	_, forbiddenParked, forbiddenAttempts, forbiddenLast := state("forbidden")
	_, missingParked, missingAttempts, missingLast := state("missing")
	_, fullParked, fullAttempts, fullLast := state("full")
	heldOut, heldParked, heldAttempts, _ := state("held")
	firstErr := "none"
	if len(roundErrs) > 0 {
		firstErr = roundErrs[0].Error()
	}
	line(t, "refused queues: %d of 5 good rows published in 5 rounds (%d rounds failed, first: %s); unauthorized: %d of 2 parked, attempts %d; not found: %d of 1 parked, attempts %d; full address: %d of 1 parked, attempts %d",
		goodOut, len(roundErrs), firstErr, forbiddenParked, forbiddenAttempts, missingParked, missingAttempts, fullParked, fullAttempts)

	assert.Empty(t, roundErrs, "a refused attach is no failure of the round")
	assert.Equal(t, 5, goodOut, "good rows published")
	assert.Equal(t, 1, fitsOut, "the first message to the tiny address fits")
	assert.Equal(t, 2, forbiddenParked)
	assert.Equal(t, maxAttempts, forbiddenAttempts)
	assert.Contains(t, forbiddenLast, "amqp:unauthorized-access")
	assert.Contains(t, forbiddenLast, forbidden)
	assert.Equal(t, 1, missingParked)
	assert.Equal(t, maxAttempts, missingAttempts)
	assert.Contains(t, missingLast, "amqp:not-found")
	assert.Equal(t, 1, fullParked, "a full address is parked as before")
	assert.Equal(t, maxAttempts, fullAttempts)
	assert.Contains(t, fullLast, "resource-limit-exceeded")
	assert.Equal(t, []int{0, 0, 0}, []int{heldOut, heldParked, heldAttempts}, "the row behind a refused one waits, untouched")

	// The rounds' events name each refusal; the third parks the row.
	failures := obs.failures()
	for _, kind := range []string{"forbidden", "missing", "full"} {
		for _, id := range ids[kind] {
			var mine []RowFailure
			for _, f := range failures {
				if f.MessageID == id {
					mine = append(mine, f)
				}
			}
			require.Len(t, mine, maxAttempts, "failures of the %s row %s", kind, id)
			for i, f := range mine {
				assert.Equal(t, i+1, f.Attempts)
				assert.Equal(t, i+1 == maxAttempts, f.Parked)
				if kind == "full" {
					assert.ErrorIs(t, f.Err, artemis.ErrNotAccepted)
					assert.NotErrorIs(t, f.Err, ErrQueueRefused, "a refused transfer is no refusal of the queue")
					continue
				}
				assert.ErrorIs(t, f.Err, ErrQueueRefused)
				var ae *amqp.Error
				require.ErrorAs(t, f.Err, &ae)
				assert.Equal(t, map[string]amqp.ErrCond{"forbidden": amqp.ErrCondUnauthorizedAccess, "missing": amqp.ErrCondNotFound}[kind], ae.Condition)
			}
		}
	}
	assert.NotContains(t, strings.Join([]string{forbiddenLast, missingLast, fullLast}, " "), "nodlq-pw")

	col := collect(t, dial(t, amqpURL), queue)
	col.await(t, 5, 300*time.Millisecond)
	col.requireEach(t, ids["good"])
}

// roundRecorder is a RelayObserver that keeps the rounds' failures.
type roundRecorder struct {
	mu   sync.Mutex
	seen []RowFailure
}

func (*roundRecorder) Settled(artemis.SettleEvent)    {}
func (*roundRecorder) Published(artemis.PublishEvent) {}

func (o *roundRecorder) Relayed(ev RelayEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, ev.Failures...)
}

func (o *roundRecorder) failures() []RowFailure {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]RowFailure(nil), o.seen...)
}

// noDLQURL is amqpURL with the broker's user that may not send to *.dlq
// (scripts/artemis; ARTEMIS_NODLQ_USER and ARTEMIS_NODLQ_PASSWORD for
// another broker).
func noDLQURL(t testing.TB, amqpURL string) string {
	t.Helper()
	u, err := url.Parse(amqpURL)
	require.NoError(t, err)
	user, password := "nodlq", "nodlq-pw"
	if v := os.Getenv("ARTEMIS_NODLQ_USER"); v != "" {
		user, password = v, os.Getenv("ARTEMIS_NODLQ_PASSWORD")
	}
	u.User = url.UserPassword(user, password)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, "amqp://"+u.Host, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(user, password)})
	if err != nil {
		// A broker started before scripts/artemis set up this user gets it
		// on its next start; CI always starts a fresh one.
		if os.Getenv("CI") != "true" {
			t.Skipf("the broker refuses user %q (%v): restart it (scripts/artemis stop && scripts/artemis start) to run this test", user, err)
		}
		t.Fatalf("the broker refuses user %q: %v (scripts/artemis start sets it up)", user, err)
	}
	_ = conn.Close()
	return u.String()
}

// disableAutoCreate turns auto-creation of addresses and queues off for the
// addresses that match, through the broker's management address (the
// user of amqpURL needs the manage permission).
func disableAutoCreate(t testing.TB, amqpURL, match string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, amqpURL, nil)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	sess, err := conn.NewSession(ctx, nil)
	require.NoError(t, err)
	replies, err := sess.NewReceiver(ctx, "", &amqp.ReceiverOptions{DynamicAddress: true})
	require.NoError(t, err)
	to, err := sess.NewSender(ctx, "activemq.management", nil)
	require.NoError(t, err)
	settings, err := json.Marshal([]string{match, `{"autoCreateAddresses":false,"autoCreateQueues":false}`})
	require.NoError(t, err)
	replyTo := replies.Address()
	require.NoError(t, to.Send(ctx, &amqp.Message{
		Properties:            &amqp.MessageProperties{ReplyTo: &replyTo},
		ApplicationProperties: map[string]any{"_AMQ_ResourceName": "broker", "_AMQ_OperationName": "addAddressSettings"},
		Value:                 string(settings),
	}, nil))
	reply, err := replies.Receive(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, replies.AcceptMessage(ctx, reply))
	require.Equal(t, true, reply.ApplicationProperties["_AMQ_OperationSucceeded"], "addAddressSettings: %v", reply.Value)
}
