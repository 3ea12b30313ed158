package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// RelayOptions configure a Relay. The zero value is usable.
type RelayOptions struct {
	// BatchSize is the most rows one round claims (default 256).
	BatchSize int
	// Concurrency is how many rounds the relay runs at once (default 3):
	// each claims rows of its own, so one round's database work overlaps
	// another's publishing. The rows of a group still go out in order.
	Concurrency int
	// PollInterval is how long the relay waits for a notification before
	// it looks at the table anyway (default 1 s): the fallback for a lost
	// LISTEN connection, and when rows become due after a back-off.
	PollInterval time.Duration
	// MaxAttempts is how many times the broker may refuse a row before it
	// is parked (default 10). A parked row stays in the table, is never
	// published and holds back the later rows of its group, until
	// someone clears parked_at (see the package documentation).
	MaxAttempts int
	// Backoff is the wait before a refused row is tried again, given the
	// number of refusals so far (default: 100 ms doubling, at most 1 min).
	// It is also the relay's own pause after a failure that is not about a
	// row (no broker, no database), with the number of failures in a row.
	Backoff func(failures int) time.Duration
	// PublishTimeout bounds one round's wait for the broker's outcomes
	// (default 30 s).
	PublishTimeout time.Duration
	// Retention is how long published rows are kept before they are
	// deleted (default 24 h; negative: never deleted).
	Retention time.Duration
	// Observer hears every publish (artemis.Observer.Published) and, when
	// it also implements RelayObserver, every round. Default: the
	// Client's Observer for the publishes, nothing for the rounds.
	Observer artemis.Observer
	// Logger gets the relay's failures (default slog.Default()).
	Logger *slog.Logger
}

// RelayObserver is an artemis.Observer that also hears of each round of
// a Relay.
type RelayObserver interface {
	Relayed(RelayEvent)
}

// RelayEvent is one round of a relay: the rows it claimed and what became
// of them.
type RelayEvent struct {
	Claimed   int           // rows claimed (locked) in the round
	Published int           // accepted by the broker and marked published
	Refused   int           // refused by the broker (or not publishable): retried later
	Parked    int           // refused for the MaxAttempts-th time: parked
	Held      int           // left for later: behind an earlier row of their group, or not sent after a failure
	Duration  time.Duration // from the claim to the commit of the marks
	Err       error         // a failure of the round (no broker, no database); nil otherwise

	// Failures are the rows refused in the round (Refused counts them,
	// Parked those of them now parked), each with its reason, the one
	// stored in the row's last_error.
	Failures []RowFailure
}

// RowFailure is a row refused in a round of a relay.
type RowFailure struct {
	MessageID string
	Queue     string
	Attempts  int  // the row's refusals so far, this one included
	Parked    bool // this refusal parked it
	// Err says why: the broker refused the transfer (it matches
	// artemis.ErrNotAccepted), or the attach of a sender to the row's queue
	// (ErrQueueRefused, naming the AMQP condition, as
	// amqp:unauthorized-access), or the stored row is not publishable
	// (ErrInvalid, artemis.ErrInvalidEnvelope).
	Err error
}

// Relay publishes the committed rows of the outbox. Any number of relays
// (in one process or many) may run on one table: a row is claimed with
// SELECT ... FOR UPDATE SKIP LOCKED and stays locked until it is marked,
// so no two relays publish it at once, and the rows of one group go out
// in order, one relay at a time.
type Relay struct {
	pool   *pgxpool.Pool
	client *artemis.Client
	o      RelayOptions
	log    *slog.Logger

	mu   sync.Mutex
	pubs map[string]*artemis.ClientPublisher

	// afterPublish, when set (tests), runs after the broker's outcomes and
	// before the marks.
	afterPublish func(accepted []string)
	// onListen, when set (tests), runs once the LISTEN took effect.
	onListen func()
}

// NewRelay returns a relay that reads the outbox through pool and
// publishes through client. Start it with Run.
func NewRelay(pool *pgxpool.Pool, client *artemis.Client, opts *RelayOptions) *Relay {
	r := &Relay{pool: pool, client: client, pubs: map[string]*artemis.ClientPublisher{}}
	if opts != nil {
		r.o = *opts
	}
	if r.o.BatchSize <= 0 {
		r.o.BatchSize = 256
	}
	if r.o.Concurrency <= 0 {
		r.o.Concurrency = 3
	}
	if r.o.PollInterval <= 0 {
		r.o.PollInterval = time.Second
	}
	if r.o.MaxAttempts <= 0 {
		r.o.MaxAttempts = 10
	}
	if r.o.Backoff == nil {
		r.o.Backoff = defaultBackoff
	}
	if r.o.PublishTimeout <= 0 {
		r.o.PublishTimeout = 30 * time.Second
	}
	if r.o.Retention == 0 {
		r.o.Retention = 24 * time.Hour
	}
	r.log = guardLogger(r.o.Logger)
	return r
}

func defaultBackoff(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// Run relays until ctx ends: Concurrency loops each claim and publish rows
// while there are any, then wait for a notification of a new row (LISTEN)
// or for PollInterval; one of them deletes the published rows older than
// Retention once a minute. It returns ctx's error. Close the relay after
// Run returned.
func (r *Relay) Run(ctx context.Context) error {
	wakes := make([]chan struct{}, r.o.Concurrency)
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1 + len(wakes))
	go func() {
		defer wg.Done()
		r.listen(lctx, wakes)
	}()
	for i, wake := range wakes {
		go func() {
			defer wg.Done()
			r.loop(ctx, wake, i == 0)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// loop runs rounds until ctx ends.
func (r *Relay) loop(ctx context.Context, wake <-chan struct{}, purges bool) {
	failures := 0
	var lastPurge time.Time
	for ctx.Err() == nil {
		ev := r.round(ctx)
		switch {
		case ev.Err != nil && ctx.Err() == nil:
			failures++
			r.log.Warn("babelqueue outbox relay: round failed", "error", ev.Err, "failures", failures)
			sleep(ctx, r.o.Backoff(failures), nil)
			continue
		case ev.Published+ev.Refused > 0:
			failures = 0
			continue // there may be more
		}
		failures = 0
		if purges && r.o.Retention > 0 && time.Since(lastPurge) >= time.Minute {
			lastPurge = time.Now()
			if _, err := r.Purge(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("babelqueue outbox relay: purge failed", "error", err)
			}
		}
		sleep(ctx, r.o.PollInterval, wake)
	}
}

// sleep waits d, or for wake (nil: never), or for ctx.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
	}
}

// listen holds a connection of its own (outside the pool) that LISTENs for
// new rows and signals every wake; when it fails, it tries again after
// PollInterval, and the relay polls meanwhile.
func (r *Relay) listen(ctx context.Context, wakes []chan struct{}) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, wakes)
		if ctx.Err() != nil {
			return
		}
		r.log.Debug("babelqueue outbox relay: LISTEN connection lost, polling meanwhile", "error", err)
		sleep(ctx, r.o.PollInterval, nil)
	}
}

func (r *Relay) listenOnce(ctx context.Context, wakes []chan struct{}) error {
	cfg := r.pool.Config().ConnConfig.Copy()
	// A wait cut short by ctx must not send the server a cancel request.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	var channel string
	if err = conn.QueryRow(ctx, listenChannel).Scan(&channel); err != nil {
		return fmt.Errorf("the outbox channel name: %w", err)
	}
	if _, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	if r.onListen != nil {
		r.onListen()
	}
	for {
		if err := conn.PgConn().WaitForNotification(ctx); err != nil {
			return err
		}
		for _, wake := range wakes {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

// listenChannel is the channel the insert trigger of the connection's
// schema notifies (schema.sql derives it with the same expression):
// "babelqueue_outbox:<schema>", or "babelqueue_outbox:<md5 of the schema
// name>" when that is longer than a channel name may be.
const listenChannel = `SELECT CASE WHEN octet_length(c) <= current_setting('max_identifier_length')::int THEN c
    ELSE 'babelqueue_outbox:' || md5(current_schema()) END
FROM (SELECT 'babelqueue_outbox:' || current_schema() AS c) AS s`

// row is a claimed outbox row.
type row struct {
	seq       int64
	id        string
	queue     string
	group     string
	headers   map[string]string
	body      []byte
	deliverAt *time.Time
	attempts  int

	err error // the publish's failure; nil: accepted
}

// claimRows claims the due rows that may go now, in seq order: a row of a
// group is left out when an earlier unpublished row of its group is parked
// or waits out a back-off (held), so held rows never fill a batch and hold
// back other groups. The probe uses the babelqueue_outbox_held index,
// whose predicate the subquery repeats.
// A deliver_at of 'infinity' or '-infinity' is no time Go holds: it is read
// as NULL, with whether it was 'infinity' (the row's error) beside it.
const claimRows = `SELECT o.seq, o.message_id, o.queue, COALESCE(o.group_id, ''), o.headers, o.body,
  CASE WHEN isfinite(o.deliver_at) THEN o.deliver_at END, o.deliver_at = 'infinity'::timestamptz IS TRUE, o.attempts
FROM babelqueue_outbox o
WHERE o.published_at IS NULL AND o.parked_at IS NULL AND o.next_attempt_at <= now()
  AND (o.group_id IS NULL OR NOT EXISTS (
    SELECT 1 FROM babelqueue_outbox h
    WHERE h.group_id = o.group_id AND h.seq < o.seq
      AND h.published_at IS NULL AND h.group_id IS NOT NULL AND (h.parked_at IS NOT NULL OR h.attempts > 0)
      AND (h.parked_at IS NOT NULL OR h.next_attempt_at > now())))
  AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::bigint[]) AS c(group_id, seq)
    WHERE c.group_id = o.group_id AND o.seq >= c.seq)
ORDER BY o.seq
LIMIT $1
FOR UPDATE OF o SKIP LOCKED`

// pendingOfGroups are the unpublished rows of the given groups up to a seq:
// what decides which claimed rows of a group may go now.
const pendingOfGroups = `SELECT group_id, seq FROM babelqueue_outbox
WHERE published_at IS NULL AND group_id = ANY($1) AND seq <= $2
ORDER BY group_id, seq`

// RelayOnce runs one round: it claims up to BatchSize due rows, publishes
// them and marks them, and reports the round to the RelayObserver. Run
// calls it in a loop; it is exported for a relay driven by a scheduler of
// your own.
func (r *Relay) RelayOnce(ctx context.Context) (RelayEvent, error) {
	ev := r.round(ctx)
	return ev, ev.Err
}

func (r *Relay) round(ctx context.Context) (ev RelayEvent) {
	start := time.Now()
	defer func() {
		ev.Duration = time.Since(start)
		if ro, ok := r.o.Observer.(RelayObserver); ok && (ev.Claimed > 0 || ev.Err != nil) {
			r.report(ro, ev)
		}
	}()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		ev.Err = fmt.Errorf("babelqueue/postgres: relay: %w", err)
		return ev
	}
	defer func() { _ = rollbackTx(ctx, tx) }()
	rows, chains, err := claimChains(ctx, tx, r.o.BatchSize)
	if err != nil {
		ev.Err = fmt.Errorf("babelqueue/postgres: relay: claim: %w", err)
		return ev
	}
	ev.Claimed = len(rows)
	if len(rows) == 0 {
		return ev
	}
	sent, transport := r.publish(ctx, chains)
	var accepted []string
	var refused []*row
	for _, rw := range sent {
		if rw.err == nil {
			accepted = append(accepted, rw.id)
		} else {
			refused = append(refused, rw)
		}
	}
	if r.afterPublish != nil {
		r.afterPublish(accepted)
	}
	ev.Held = ev.Claimed - len(sent) // held back by the group order, or not sent after a failure
	parked, err := r.mark(ctx, tx, sent)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		ev.Err = fmt.Errorf("babelqueue/postgres: relay: mark %d published rows: %w", len(accepted), err)
		return ev
	}
	ev.Published, ev.Refused, ev.Parked = len(accepted), len(refused), len(parked)
	for _, rw := range refused {
		f := RowFailure{MessageID: rw.id, Queue: rw.queue, Attempts: rw.attempts + 1, Parked: parked[rw.seq], Err: rw.err}
		ev.Failures = append(ev.Failures, f)
		r.log.Warn("babelqueue outbox relay: the broker refused a row", "message_id", rw.id, "queue", rw.queue,
			"attempts", f.Attempts, "parked", f.Parked, "error", rw.err)
	}
	if transport != nil {
		ev.Err = fmt.Errorf("babelqueue/postgres: relay: publish: %w", transport)
	}
	return ev
}

func (r *Relay) report(ro RelayObserver, ev RelayEvent) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("babelqueue outbox relay: observer panicked", "panic", p)
		}
	}()
	ro.Relayed(ev)
}

// claimTries bounds the claims of one round: each claim after the first
// leaves out the groups whose rows the one before could not send.
const claimTries = 3

// claimChains claims the round's rows and splits them into chains (see
// order). A claim that took rows it cannot send (behind an earlier row of
// their group that another round holds) is undone, which releases its
// locks, and made again without those rows, so that they never take the
// place of rows that can go: up to claimTries claims; the last one's
// unsendable rows stay claimed and wait (RelayEvent.Held).
func claimChains(ctx context.Context, tx pgx.Tx, limit int) ([]*row, [][]*row, error) {
	var cutGroups []string
	var cutSeqs []int64
	if _, err := tx.Exec(ctx, "SAVEPOINT babelqueue_claim"); err != nil {
		return nil, nil, err
	}
	for try := 1; ; try++ {
		rows, err := claim(ctx, tx, limit, cutGroups, cutSeqs)
		if err != nil || len(rows) == 0 {
			return rows, nil, err
		}
		chains, cuts, err := order(ctx, tx, rows)
		if err != nil || len(cuts) == 0 || try == claimTries {
			return rows, chains, err
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT babelqueue_claim"); err != nil {
			return nil, nil, err
		}
		for g, seq := range cuts {
			cutGroups, cutSeqs = append(cutGroups, g), append(cutSeqs, seq)
		}
	}
}

// claim claims up to limit rows (claimRows), leaving out the rows of each
// group cutGroups[i] from seq cutSeqs[i] on.
func claim(ctx context.Context, tx pgx.Tx, limit int, cutGroups []string, cutSeqs []int64) ([]*row, error) {
	q, err := tx.Query(ctx, claimRows, limit, cutGroups, cutSeqs)
	if err != nil {
		return nil, err
	}
	var rows []*row
	for q.Next() {
		rw := new(row)
		var headers []byte
		var never bool
		if err := q.Scan(&rw.seq, &rw.id, &rw.queue, &rw.group, &headers, &rw.body, &rw.deliverAt, &never, &rw.attempts); err != nil {
			q.Close()
			return nil, err
		}
		if never {
			rw.err = fmt.Errorf("%w: deliver_at is 'infinity'", ErrInvalid)
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &rw.headers); err != nil {
				rw.err = fmt.Errorf("%w: the stored headers: %w", ErrInvalid, err)
			}
		}
		rows = append(rows, rw)
	}
	return rows, q.Err()
}

// order splits the claimed rows into chains: each row without a group is a
// chain of its own; the rows of a group form one chain, in seq order, cut
// before the first unpublished row of the group that this round did not
// claim (another relay holds it, or it waits out a back-off, or it is
// parked): the rest of the group waits for a later round. cuts has, for
// each group cut short, the seq of its first claimed row left out.
func order(ctx context.Context, tx pgx.Tx, rows []*row) (chains [][]*row, cuts map[string]int64, err error) {
	groups := map[string][]*row{}
	var names []string
	var maxSeq int64
	for _, rw := range rows {
		if rw.group == "" {
			chains = append(chains, []*row{rw})
			continue
		}
		if _, ok := groups[rw.group]; !ok {
			names = append(names, rw.group)
		}
		groups[rw.group] = append(groups[rw.group], rw)
		maxSeq = max(maxSeq, rw.seq)
	}
	if len(names) == 0 {
		return chains, nil, nil
	}
	q, err := tx.Query(ctx, pendingOfGroups, names, maxSeq)
	if err != nil {
		return nil, nil, err
	}
	pending := map[string][]int64{}
	for q.Next() {
		var g string
		var seq int64
		if err := q.Scan(&g, &seq); err != nil {
			q.Close()
			return nil, nil, err
		}
		pending[g] = append(pending[g], seq)
	}
	if err := q.Err(); err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	for _, g := range names {
		mine := groups[g] // in seq order, as claimed
		n := 0
		for _, seq := range pending[g] {
			if n == len(mine) || mine[n].seq != seq {
				break
			}
			n++
		}
		if n > 0 {
			chains = append(chains, mine[:n])
		}
		if n < len(mine) {
			if cuts == nil {
				cuts = map[string]int64{}
			}
			cuts[g] = mine[n].seq
		}
	}
	return chains, cuts, nil
}

// publish sends the chains: the first row of every chain at once
// (pipelined), each next row of a chain once the one before it was
// accepted. It returns the rows sent, each with its outcome, and the first
// failure that was not the broker's answer about a row (no broker, an
// unknown outcome, a timeout): the rows it hit are not among the sent,
// and the round stops sending.
func (r *Relay) publish(ctx context.Context, chains [][]*row) (sent []*row, transport error) {
	pctx, cancel := context.WithTimeout(ctx, r.o.PublishTimeout)
	defer cancel()
	type inflight struct {
		chain   []*row
		receipt *artemis.Receipt
	}
	next := make([]inflight, 0, len(chains))
	for _, c := range chains {
		next = append(next, inflight{chain: c})
	}
	refused := map[string]error{} // queues whose attach the broker refused in this round
	for len(next) > 0 && transport == nil {
		// Write the head of every chain, then wait for each in turn.
		for i := range next {
			head := next[i].chain[0]
			if head.err != nil { // not publishable: refused without a send
				continue
			}
			if err := refused[head.queue]; err != nil {
				head.err = err // refused again: no new attach in this round
				continue
			}
			rc, err := r.send(pctx, head)
			if err != nil {
				if isRefusal(err) {
					head.err = err
					continue
				}
				if qerr := queueRefusal(head.queue, err); qerr != nil {
					refused[head.queue], head.err = qerr, qerr
					continue
				}
				transport = err
				next = next[:i]
				break
			}
			next[i].receipt = rc
		}
		var later []inflight
		for _, f := range next {
			head := f.chain[0]
			if f.receipt != nil {
				if err := f.receipt.Wait(pctx); err != nil {
					if qerr := queueRefusal(head.queue, err); qerr != nil {
						err = qerr
					}
					if !isRefusal(err) {
						if transport == nil {
							transport = err
						}
						continue // outcome unknown: not marked, published again later
					}
					head.err = err
				}
			}
			sent = append(sent, head)
			if head.err == nil && len(f.chain) > 1 {
				later = append(later, inflight{chain: f.chain[1:]})
			}
		}
		next = later
	}
	return sent, transport
}

// isRefusal reports the broker's (or the library's) answer about the row
// itself, which counts toward parking it, as opposed to a failure of the
// way to the broker, which does not.
func isRefusal(err error) bool {
	return errors.Is(err, artemis.ErrNotAccepted) || errors.Is(err, artemis.ErrInvalidEnvelope) ||
		errors.Is(err, artemis.ErrInvalidConfig) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrQueueRefused)
}

func (r *Relay) send(ctx context.Context, rw *row) (*artemis.Receipt, error) {
	p, err := r.publisher(ctx, rw.queue)
	if err != nil {
		return nil, err
	}
	opts := make([]artemis.PublishOption, 0, 3)
	if rw.group != "" {
		opts = append(opts, artemis.WithGroupID(rw.group))
	}
	if len(rw.headers) > 0 {
		opts = append(opts, artemis.WithHeaders(rw.headers))
	}
	if rw.deliverAt != nil {
		if d := time.Until(*rw.deliverAt); d > 0 {
			opts = append(opts, artemis.WithDelay(d))
		}
	}
	return p.PublishWithReceipt(ctx, artemis.Encoded(rw.body), opts...)
}

// publisher returns the relay's publisher to queue, attached on first use.
func (r *Relay) publisher(ctx context.Context, queue string) (*artemis.ClientPublisher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pubs[queue]; ok {
		return p, nil
	}
	opts := []artemis.PublishOption{artemis.WithDuplicateDetection()}
	if r.o.Observer != nil {
		opts = append(opts, artemis.WithObserver(r.o.Observer))
	}
	p, err := r.client.Publisher(ctx, queue, opts...)
	if err != nil {
		return nil, err
	}
	r.pubs[queue] = p
	return p, nil
}

const markPublished = `UPDATE babelqueue_outbox SET published_at = clock_timestamp(), last_error = NULL WHERE seq = ANY($1)`

// markRefused counts a refusal without overflowing attempts (an integer):
// at its maximum it stays there, and the row is parked.
const markRefused = `UPDATE babelqueue_outbox o SET
    attempts = LEAST(o.attempts, 2147483646) + 1,
    last_error = f.error,
    next_attempt_at = now() + f.backoff_us * interval '1 microsecond',
    parked_at = CASE WHEN o.attempts >= LEAST($4::bigint, 2147483647) - 1 THEN now() END
FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS f(seq, error, backoff_us)
WHERE o.seq = f.seq
RETURNING o.seq, o.parked_at IS NOT NULL`

// mark records the outcomes of the sent rows in the round's transaction and
// returns the seqs of the rows it parked.
func (r *Relay) mark(ctx context.Context, tx pgx.Tx, sent []*row) (parked map[int64]bool, err error) {
	var ok, bad, backoff []int64
	var errs []string
	for _, rw := range sent {
		if rw.err == nil {
			ok = append(ok, rw.seq)
			continue
		}
		bad = append(bad, rw.seq)
		errs = append(errs, errorText(rw.err))
		backoff = append(backoff, r.o.Backoff(rw.attempts+1).Microseconds())
	}
	if len(ok) > 0 {
		if _, err := tx.Exec(ctx, markPublished, ok); err != nil {
			return nil, err
		}
	}
	if len(bad) == 0 {
		return nil, nil
	}
	q, err := tx.Query(ctx, markRefused, bad, errs, backoff, r.o.MaxAttempts)
	if err != nil {
		return nil, err
	}
	parked = map[int64]bool{}
	for q.Next() {
		var seq int64
		var p bool
		if err := q.Scan(&seq, &p); err != nil {
			q.Close()
			return nil, err
		}
		if p {
			parked[seq] = true
		}
	}
	return parked, q.Err()
}

// maxErrorText bounds the error text stored in last_error.
const maxErrorText = 4096

// errorText is err's text as a text column takes it: valid UTF-8 without
// NUL (PostgreSQL refuses either, and the whole mark with it), at most
// maxErrorText bytes, cut at a rune boundary.
func errorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Purge deletes published rows older than Retention, 1,000 at a time,
// and returns how many it deleted.
func (r *Relay) Purge(ctx context.Context) (int64, error) {
	if r.o.Retention < 0 {
		return 0, nil
	}
	return purgeBatches(ctx, r.pool, `DELETE FROM babelqueue_outbox WHERE seq IN (
    SELECT seq FROM babelqueue_outbox WHERE published_at < now() - $1 * interval '1 microsecond'
    LIMIT 1000 FOR UPDATE SKIP LOCKED)`, r.o.Retention.Microseconds())
}

// purgeBatches runs a DELETE of at most 1,000 rows until one deletes fewer.
func purgeBatches(ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, sql, args...)
		if err != nil {
			return total, fmt.Errorf("babelqueue/postgres: purge: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 1000 {
			return total, nil
		}
	}
}

// Close detaches the relay's publishers. The Client stays open.
func (r *Relay) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for q, p := range r.pubs {
		errs = append(errs, p.Close(ctx))
		delete(r.pubs, q)
	}
	return errors.Join(errs...)
}
