package artemis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
)

// Defaults of the idempotency options.
const (
	// DefaultClaimLease is how long a claim lasts before another delivery
	// of its id may take it over. Choose a lease longer than the handler's
	// longest run: past it a duplicate may run concurrently.
	DefaultClaimLease = 5 * time.Minute
	// DefaultStoreTimeout bounds a Complete or Release call, which runs
	// even after the handler's context ended.
	DefaultStoreTimeout = 30 * time.Second
)

// The bounds of the wait for a busy id: the wrapper asks the store again
// after waitFirst, doubling up to waitMax, and at once when an in-memory
// store says the claim ended.
const (
	waitFirst = 10 * time.Millisecond
	waitMax   = time.Second
)

// IdempotencyOption configures Idempotent and IdempotentHandlers.
type IdempotencyOption func(*idempotency)

// WithClaimLease sets how long a claim lasts. A value <= 0 keeps the
// default. Default: DefaultClaimLease (5m).
func WithClaimLease(d time.Duration) IdempotencyOption {
	return func(i *idempotency) {
		if d > 0 {
			i.lease = d
		}
	}
}

// WithStoreTimeout bounds each Complete and Release call. A value <= 0
// keeps the default. Default: DefaultStoreTimeout (30s).
func WithStoreTimeout(d time.Duration) IdempotencyOption {
	return func(i *idempotency) {
		if d > 0 {
			i.timeout = d
		}
	}
}

// WithCompleteError sets the callback told when the store failed to record
// a success (Complete returned an error). The handler's effect happened and
// the delivery is still accepted (failing it would run the effect again at
// once); the id stays claimed until its lease ends, and a duplicate
// delivered after that runs again. Default: none, the failure is logged
// at error level to slog.Default().
func WithCompleteError(fn func(ctx context.Context, id string, err error)) IdempotencyOption {
	return func(i *idempotency) { i.onComplete = fn }
}

type idempotency struct {
	store      IdempotencyStore
	lease      time.Duration
	timeout    time.Duration
	onComplete func(ctx context.Context, id string, err error)
	after      func(time.Duration) <-chan time.Time // time.After; a test's own clock
}

func newIdempotency(store IdempotencyStore, opts []IdempotencyOption) *idempotency {
	if store == nil {
		store = NewMemoryStore()
	}
	i := &idempotency{store: store, lease: DefaultClaimLease, timeout: DefaultStoreTimeout, after: time.After}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Idempotent wraps h so that each message's effect happens once per
// meta.id, however often the message is delivered:
//
//   - a delivery whose meta.id is done is skipped: h is not called and the
//     wrapper returns nil, so the Consumer accepts it;
//   - otherwise the wrapper claims the id, calls h, and marks the id done
//     when h returns nil; when h returns an error (or panics, or exits its
//     goroutine) the claim is released and the id stays unmarked, so the
//     Consumer's retry and dead-lettering apply as without the wrapper;
//   - a delivery whose id another delivery is running (a duplicate handled
//     concurrently) waits for that one, within its own context: when the
//     first succeeds it is skipped, when the first fails it claims the id
//     and runs, when the first's claim expires (its holder died) it takes
//     the claim over; when its context ends first, it fails with the
//     context's error and the broker delivers it again later. It is never
//     accepted before the first succeeded;
//   - a delivery without a usable meta.id (blank) runs h unchanged: the
//     wrapper cannot tell it from another, and never drops work it cannot
//     identify;
//   - a replay (IsReplay: the bq-replay-bypass header is set) runs h even
//     when its id is done (it still waits for a delivery of its id in
//     flight); a successful replay leaves the id done, a failed one leaves
//     it as it was. Inside h, BypassExternalEffects skips the effects the
//     first run already had.
//
// A store error on claiming fails the attempt (the effect never runs
// unguarded). A nil store means a new in-memory store (NewMemoryStore), for
// one process.
func Idempotent(store IdempotencyStore, h HandlerFunc, opts ...IdempotencyOption) HandlerFunc {
	if h == nil {
		return nil // NewConsumer reports the nil handler
	}
	return newIdempotency(store, opts).wrap(h)
}

// IdempotentHandlers wraps every handler of hs with Idempotent, sharing one
// store: a nil store means one new in-memory store for all of them.
func IdempotentHandlers(store IdempotencyStore, hs Handlers, opts ...IdempotencyOption) Handlers {
	i := newIdempotency(store, opts)
	out := make(Handlers, len(hs))
	for urn, h := range hs {
		if h == nil {
			out[urn] = nil // NewConsumer reports the nil handler
			continue
		}
		out[urn] = i.wrap(h)
	}
	return out
}

func (i *idempotency) wrap(h HandlerFunc) HandlerFunc {
	return func(ctx context.Context, env *Envelope, msg *amqp.Message) error {
		if env == nil || strings.TrimSpace(env.Meta.ID) == "" {
			return h(ctx, env, msg)
		}
		c, err := i.claim(ctx, env.Meta.ID, IsReplay(ctx))
		if err != nil {
			return err
		}
		if c.Status == ClaimDone {
			return nil
		}
		return i.run(ctx, c, h, env, msg)
	}
}

// claim claims id, waiting while another delivery holds it. It returns a
// claim whose status is ClaimAcquired or ClaimDone, or an error.
func (i *idempotency) claim(ctx context.Context, id string, replay bool) (Claim, error) {
	wait := waitFirst
	for {
		var c Claim
		var err error
		var ended <-chan struct{}
		if m, ok := i.store.(*MemoryStore); ok {
			c, ended = m.claim(id, i.lease, replay)
		} else {
			c, err = i.store.Claim(ctx, id, i.lease, replay)
		}
		if err != nil {
			return Claim{}, fmt.Errorf("idempotency: claiming message %s: %w", truncate(id), err)
		}
		switch c.Status {
		case ClaimAcquired, ClaimDone:
			return c, nil
		case ClaimBusy:
		default:
			return Claim{}, fmt.Errorf("idempotency: claiming message %s: the store answered %v", truncate(id), c.Status)
		}
		select {
		case <-ctx.Done():
			return Claim{}, fmt.Errorf("idempotency: message %s is being handled by another delivery: %w", truncate(id), context.Cause(ctx))
		case <-ended:
		case <-i.after(wait):
			wait = min(2*wait, waitMax)
		}
	}
}

// run calls h under the claim c and records its result in the store.
func (i *idempotency) run(ctx context.Context, c Claim, h HandlerFunc, env *Envelope, msg *amqp.Message) (err error) {
	returned := false
	defer func() {
		if returned {
			return
		}
		// A panic or runtime.Goexit: give the claim back, and let the
		// Consumer see the panic as it would without the wrapper.
		_ = i.release(ctx, c)
	}()
	err = h(ctx, env, msg)
	returned = true
	if err != nil {
		if rerr := i.release(ctx, c); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	sctx, cancel := i.storeCtx(ctx)
	defer cancel()
	if cerr := i.store.Complete(sctx, c); cerr != nil {
		cerr = fmt.Errorf("idempotency: recording message %s as processed: %w", truncate(c.ID), cerr)
		if i.onComplete != nil {
			i.onComplete(ctx, c.ID, cerr)
		} else {
			logLine(ctx, slog.Default(), slog.LevelError, "idempotency store failed to record a processed message",
				slog.String("message_id", c.ID), slog.Any("error", cerr))
		}
	}
	return nil
}

func (i *idempotency) release(ctx context.Context, c Claim) error {
	sctx, cancel := i.storeCtx(ctx)
	defer cancel()
	if err := i.store.Release(sctx, c); err != nil {
		return fmt.Errorf("idempotency: releasing message %s: %w", truncate(c.ID), err)
	}
	return nil
}

// storeCtx is ctx without its cancellation, bounded by the store timeout:
// the result of a handler is recorded even when its context ended.
func (i *idempotency) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), i.timeout)
}
