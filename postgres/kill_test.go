package postgres

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The SIGKILL scenarios re-execute this test binary as the process to kill:
// BQ_POSTGRES_CHILD names its part (TestMain runs it instead of the tests),
// it prints a line when it reaches the point to be killed at, and the test
// kills it there with SIGKILL.
func TestMain(m *testing.M) {
	if part := os.Getenv("BQ_POSTGRES_CHILD"); part != "" {
		os.Exit(runChild(part))
	}
	os.Exit(m.Run())
}

func runChild(part string) int {
	pgURL, amqpURL := os.Getenv("BQ_POSTGRES_URL"), os.Getenv("ARTEMIS_URL")
	schema, queue := os.Getenv("BQ_CHILD_SCHEMA"), os.Getenv("BQ_CHILD_QUEUE")
	t := &childT{}
	db := openDB(t, pgURL, schema, false)
	client := dial(t, amqpURL)
	ctx := context.Background()
	switch part {
	case "relay":
		relay := NewRelay(db.pool, client, nil)
		relay.afterPublish = func(accepted []string) {
			fmt.Printf("PUBLISHED %d\n", len(accepted))
			time.Sleep(time.Minute) // killed here
		}
		_, err := relay.RelayOnce(ctx)
		fmt.Fprintln(os.Stderr, "relay round ended:", err)
	case "consumer":
		inbox, err := NewInbox(db.pool, "billing", nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		inbox.afterCommit = func(env *artemis.Envelope) {
			fmt.Printf("COMMITTED %s\n", env.Meta.ID)
			time.Sleep(time.Minute) // killed here
		}
		cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: inbox.Handle(chargeOnce)}, artemis.WithoutDeadLetter())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		err = client.Consume(ctx, queue, cons)
		fmt.Fprintln(os.Stderr, "consume ended:", err)
	}
	return 1 // the child is meant to be killed before it gets here
}

// childT lets the test helpers run in a child process, outside a test.
type childT struct{ testing.TB }

func (*childT) Helper()                   {}
func (*childT) Cleanup(func())            {}
func (*childT) Name() string              { return "child" }
func (*childT) Skip(args ...any)          { fmt.Fprintln(os.Stderr, args...); os.Exit(3) }
func (*childT) Errorf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
func (*childT) FailNow()                  { os.Exit(2) }
func (*childT) Fatalf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); os.Exit(2) }

// chargeOnce is the effect: a row in charges, in the inbox's transaction.
func chargeOnce(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, _ *amqp.Message) error {
	_, err := tx.Exec(ctx, "INSERT INTO charges (message_id) VALUES ($1)", env.Meta.ID)
	return err
}

const chargesTable = "CREATE TABLE charges (message_id text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"

// startChild runs this binary as part, and returns once it printed a line
// starting with want (the line), with a function that SIGKILLs it.
func startChild(t *testing.T, part string, db *testDB, queue, want string) (string, func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BQ_POSTGRES_CHILD="+part, "BQ_CHILD_SCHEMA="+db.schema, "BQ_CHILD_QUEUE="+queue)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), want) {
				lines <- sc.Text()
				return
			}
		}
		close(lines)
	}()
	kill := func() {
		_ = cmd.Process.Kill() // SIGKILL
		err := cmd.Wait()
		assert.Error(t, err, "the child was killed")
	}
	select {
	case l, ok := <-lines:
		if !ok {
			kill()
			t.Fatalf("the child %s ended without printing %q", part, want)
		}
		return l, kill
	case <-time.After(60 * time.Second):
		kill()
		t.Fatalf("the child %s did not print %q in 60 s", part, want)
	}
	return "", nil
}

// The relay SIGKILLed after the broker accepted its messages and before it
// marked them: the rows are published again by the next relay, and the
// broker stores each message once (duplicate detection).
func TestRelayKilledBetweenPublishAndMarkStoresOnce(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	const n = 100
	ids := writeOrders(t, db, queue, n, func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("g%d", i%3)
		}
		return ""
	})

	got, kill := startChild(t, "relay", db, queue, "PUBLISHED ")
	kill()
	var accepted int
	_, err := fmt.Sscanf(got, "PUBLISHED %d", &accepted)
	require.NoError(t, err)
	require.Positive(t, accepted)
	pending := db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL")
	require.Equal(t, n, pending, "no row marked before the kill")

	// PostgreSQL ends the dead relay's transaction (and its row locks) once
	// it sees the connection closed.
	waitFor(t, 30*time.Second, func() bool { return lockable(t, db) == n })

	client := dial(t, amqpURL)
	obs := newCountingObserver()
	relay := NewRelay(db.pool, client, &RelayOptions{Observer: obs})
	t.Cleanup(func() { _ = relay.Close(context.Background()) })
	drain(t, relay)
	require.Zero(t, db.count(t, "SELECT count(*) FROM babelqueue_outbox WHERE published_at IS NULL"))
	republished, _ := obs.summary()

	col := collect(t, client, queue)
	dups, total := col.await(t, n, 2*time.Second)
	col.requireEach(t, ids)
	line(t, "relay SIGKILLed between publish and mark: %d accepted before the kill, %d rows still pending after it, %d published again; %d stored, %d duplicates",
		accepted, pending, republished, total, dups)
}

// The consumer SIGKILLed after its inbox transaction committed and before
// it accepted the delivery: the redelivery is accepted without running the
// effect again.
func TestInboxConsumerKilledBetweenCommitAndAcceptRunsOnce(t *testing.T) {
	db, amqpURL, queue := newBrokerDB(t)
	_, err := db.pool.Exec(context.Background(), chargesTable)
	require.NoError(t, err)
	client := dial(t, amqpURL)
	pub, err := client.Publisher(context.Background(), queue)
	require.NoError(t, err)
	id, err := pub.Publish(context.Background(), artemis.Job(urnOrder, map[string]int{"amount": 42}))
	require.NoError(t, err)

	got, kill := startChild(t, "consumer", db, queue, "COMMITTED ")
	kill()
	require.Equal(t, "COMMITTED "+id, got)
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM charges WHERE message_id = $1", id), "committed before the kill")

	var ran, skipped atomicCount
	inbox, err := NewInbox(db.pool, "billing", &InboxOptions{OnDuplicate: func(*artemis.Envelope) { skipped.add() }})
	require.NoError(t, err)
	cons, err := artemis.NewConsumer(artemis.Handlers{urnOrder: inbox.Handle(
		func(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, msg *amqp.Message) error {
			ran.add()
			return chargeOnce(ctx, tx, env, msg)
		})}, artemis.WithoutDeadLetter())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Consume(ctx, queue, cons)
	}()
	waitFor(t, 30*time.Second, func() bool { return skipped.get() == 1 })
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	assert.Zero(t, ran.get(), "the handler did not run again")
	charges := db.count(t, "SELECT count(*) FROM charges WHERE message_id = $1", id)
	assert.Equal(t, 1, charges)
	line(t, "consumer SIGKILLed between commit and accept: redelivered 1, handler runs after the kill %d, skipped %d, effects %d",
		ran.get(), skipped.get(), charges)
}

// lockable counts the outbox rows no transaction holds a lock on.
func lockable(t testing.TB, db *testDB) int {
	t.Helper()
	ctx := context.Background()
	tx, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var k int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM (SELECT 1 FROM babelqueue_outbox FOR UPDATE SKIP LOCKED) s").Scan(&k))
	return k
}
