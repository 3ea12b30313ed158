package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// InboxHandler handles one delivery inside the inbox's transaction: every
// database write it makes through tx commits together with the inbox
// record of the message, or not at all. It must not commit or roll back
// tx. A non-nil error rolls everything back, and the delivery takes the
// Consumer's usual failure path (retry, then dead letter).
type InboxHandler func(ctx context.Context, tx pgx.Tx, env *artemis.Envelope, msg *amqp.Message) error

// InboxOptions configure an Inbox. The zero value is usable.
type InboxOptions struct {
	// Retention is how long a record is kept (default 7 days): a delivery
	// of the same meta.id after that runs the handler again. Keep it well
	// over the longest time a message may be redelivered or redriven.
	Retention time.Duration
	// PurgeInterval is how often Run purges expired records (default 1 h).
	PurgeInterval time.Duration
	// PurgeBatch is how many records one purge statement deletes (default
	// 1,000).
	PurgeBatch int
	// OnDuplicate, when set, is called for each delivery accepted without
	// running the handler because its record committed before.
	OnDuplicate func(env *artemis.Envelope)
	// Logger gets the purge failures of Run (default slog.Default()).
	Logger *slog.Logger
}

// Inbox makes a handler's database effect happen once per meta.id for one
// consumer name: the handler runs in a transaction that also inserts the
// record (consumer, meta.id); the transaction commits before the handler
// returns to the Consumer, which then accepts the delivery.
//
//   - A delivery whose record committed earlier (a redelivery after the
//     consumer died between the commit and the accept, or a second copy)
//     is accepted without running the handler.
//   - Concurrent deliveries of one id (any number of consumers, processes,
//     goroutines) run the handler once: the second insert of the record
//     waits for the first transaction, and finds the record once it
//     committed (if it rolled back, the waiting delivery runs the handler).
//   - A handler error (or a failed commit) rolls back the record and the
//     handler's writes, and the error goes to the Consumer: retry, then
//     dead letter.
//   - An envelope with no meta.id runs the handler in a transaction
//     without a record: nothing to recognise a redelivery by.
//   - A deliberate replay (the bq-replay-bypass header, artemis.IsReplay)
//     runs the handler even when the record exists, after any delivery of
//     the id in flight finished; artemis.BypassExternalEffects in the
//     handler skips what must not happen twice. A failed replay rolls
//     back and leaves the record as it was.
//
// What the handler does outside tx (an e-mail, an HTTP call, a publish) is
// not covered: it runs again when the transaction rolls back and the
// message is redelivered.
type Inbox struct {
	pool     *pgxpool.Pool
	consumer string
	o        InboxOptions
	log      *slog.Logger

	// afterCommit, when set (tests), runs after the commit, before the
	// handler returns to the Consumer.
	afterCommit func(env *artemis.Envelope)
}

// NewInbox returns the inbox of the consumer named consumer (the name keys
// the records: two consumers of one message each run their handler once).
func NewInbox(pool *pgxpool.Pool, consumer string, opts *InboxOptions) (*Inbox, error) {
	if strings.TrimSpace(consumer) == "" {
		return nil, fmt.Errorf("%w: the inbox's consumer name is blank", ErrInvalid)
	}
	in := &Inbox{pool: pool, consumer: consumer}
	if opts != nil {
		in.o = *opts
	}
	if in.o.Retention <= 0 {
		in.o.Retention = 7 * 24 * time.Hour
	}
	if in.o.PurgeInterval <= 0 {
		in.o.PurgeInterval = time.Hour
	}
	if in.o.PurgeBatch <= 0 {
		in.o.PurgeBatch = 1000
	}
	in.log = guardLogger(in.o.Logger)
	return in, nil
}

const insertInbox = `INSERT INTO babelqueue_inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`

// replayInbox records a replay: the record is taken (locked, waiting for a
// delivery of the same id in flight) whether or not it existed.
const replayInbox = `INSERT INTO babelqueue_inbox (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO UPDATE SET processed_at = now()`

// Handle wraps h as an artemis.HandlerFunc, for artemis.Handlers.
func (in *Inbox) Handle(h InboxHandler) artemis.HandlerFunc {
	return func(ctx context.Context, env *artemis.Envelope, msg *amqp.Message) error {
		return in.handle(ctx, h, env, msg)
	}
}

func (in *Inbox) handle(ctx context.Context, h InboxHandler, env *artemis.Envelope, msg *amqp.Message) (err error) {
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("babelqueue/postgres: inbox: %w", err)
	}
	// Rolled back on every way out but a commit: an error, a duplicate, and
	// a handler that panics or exits its goroutine (runtime.Goexit), which
	// would otherwise leave the transaction open, holding its connection
	// and the record's row lock. After a commit it is a no-op.
	defer in.rollback(ctx, tx)
	if env.Meta.ID != "" {
		sql := insertInbox
		if artemis.IsReplay(ctx) {
			sql = replayInbox
		}
		tag, err := tx.Exec(ctx, sql, in.consumer, env.Meta.ID)
		if err != nil {
			return fmt.Errorf("babelqueue/postgres: inbox record %s: %w", env.Meta.ID, err)
		}
		if tag.RowsAffected() == 0 {
			// Committed before: the effect happened. Accept. The
			// transaction ends first, so OnDuplicate (user code, which may
			// use the pool itself) never runs holding its connection.
			in.rollback(ctx, tx)
			if in.o.OnDuplicate != nil {
				in.o.OnDuplicate(env)
			}
			return nil
		}
	}
	if err = h(ctx, tx, env, msg); err != nil {
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("babelqueue/postgres: inbox commit %s: %w", env.Meta.ID, err)
	}
	if in.afterCommit != nil {
		in.afterCommit(env)
	}
	return nil
}

// rollbackTimeout bounds the ROLLBACK of a transaction this package began
// (the inbox's, the relay's round, Migrate's), and the close of the relay's
// LISTEN connection. It runs under a context of its own: the caller's ctx
// may be cancelled already, and pgx sends nothing on a cancelled one; but a
// server that stops answering must not hold the caller past it.
const rollbackTimeout = 5 * time.Second

// rollbackTx rolls tx back, unless it committed or rolled back already, and
// waits for the server's answer at most rollbackTimeout. When that bound
// expires pgx closes the connection, and the server rolls back on its own.
func rollbackTx(ctx context.Context, tx pgx.Tx) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := tx.Rollback(rctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

// rollback rolls tx back (rollbackTx) and logs a failure.
func (in *Inbox) rollback(ctx context.Context, tx pgx.Tx) {
	if err := rollbackTx(ctx, tx); err != nil {
		in.log.Debug("babelqueue inbox: rollback failed", "error", err)
	}
}

// Purge deletes the records older than Retention, PurgeBatch at a time,
// and returns how many it deleted.
func (in *Inbox) Purge(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := in.pool.Exec(ctx, `DELETE FROM babelqueue_inbox WHERE ctid IN (
    SELECT ctid FROM babelqueue_inbox
    WHERE consumer = $1 AND processed_at < now() - $2 * interval '1 microsecond'
    LIMIT $3)`, in.consumer, in.o.Retention.Microseconds(), in.o.PurgeBatch)
		if err != nil {
			return total, fmt.Errorf("babelqueue/postgres: inbox purge: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(in.o.PurgeBatch) {
			return total, nil
		}
	}
}

// Run purges expired records every PurgeInterval until ctx ends, and
// returns ctx's error.
func (in *Inbox) Run(ctx context.Context) error {
	t := time.NewTicker(in.o.PurgeInterval)
	defer t.Stop()
	for {
		if _, err := in.Purge(ctx); err != nil && ctx.Err() == nil {
			in.log.Warn("babelqueue inbox: purge failed", "consumer", in.consumer, "error", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
