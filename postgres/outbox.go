package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// WriteOption configures one outbox write: Write and WriteEnvelope.
type WriteOption func(*writeConfig)

// BuildOption is an option of Write, which builds the envelope: a
// WriteOption, or the options of that envelope given with WithEnvelope
// (artemis.EnvelopeTraceID continues a trace). The trace id is part of the
// envelope, so it is set where the envelope is built: WriteEnvelope stores
// an envelope that already has one and takes WriteOptions alone, so
// WithEnvelope given to it does not compile.
type BuildOption interface{ buildOption() }

func (WriteOption) buildOption() {}

// envelopeOptions are the artemis.EnvelopeOptions of WithEnvelope.
type envelopeOptions []artemis.EnvelopeOption

func (envelopeOptions) buildOption() {}

// WithEnvelope gives Write options for the envelope it builds, applied
// after artemis.EnvelopeQueue(queue): artemis.EnvelopeTraceID(id) continues
// a trace, artemis.EnvelopeCreatedAt sets meta.created_at.
func WithEnvelope(opts ...artemis.EnvelopeOption) BuildOption { return envelopeOptions(opts) }

type writeConfig struct {
	groupID string
	headers map[string]string
	delay   time.Duration
}

// WithGroupID puts the message in a message group (properties.group-id).
// The relay publishes the rows of one group in the order they were written,
// each only once the one before it was accepted.
func WithGroupID(key string) WriteOption { return func(c *writeConfig) { c.groupID = key } }

// WithHeaders adds out-of-band headers (W3C traceparent, ...), published as
// string application properties. Blank keys and values are dropped.
func WithHeaders(h map[string]string) WriteOption {
	return func(c *writeConfig) {
		for k, v := range h {
			if strings.TrimSpace(k) == "" || strings.TrimSpace(v) == "" {
				continue
			}
			if c.headers == nil {
				c.headers = make(map[string]string, len(h))
			}
			c.headers[k] = v
		}
	}
}

// WithDelay schedules the message for delivery d after the writing
// transaction began. The relay publishes it at once, with the delay that is
// left (Artemis holds it until then).
func WithDelay(d time.Duration) WriteOption { return func(c *writeConfig) { c.delay = d } }

// ErrInvalid is matched by the errors of a write refused before anything
// was stored: a blank queue, an invalid envelope.
var ErrInvalid = errors.New("babelqueue/postgres: invalid outbox write")

// Write builds an envelope for urn and data, addressed to queue (meta.queue),
// and stores it in the outbox within tx, the caller's transaction: the
// message exists if and only if tx commits. It returns meta.id. data is what
// artemis.NewEnvelope takes: a struct, a map, a json.RawMessage or nil.
// opts are WriteOptions and WithEnvelope (see BuildOption).
func Write(ctx context.Context, tx pgx.Tx, queue, urn string, data any, opts ...BuildOption) (string, error) {
	env, cfg, err := buildWrite(queue, urn, data, opts)
	if err != nil {
		return "", err
	}
	if err := write(ctx, tx, queue, env, cfg); err != nil {
		return "", err
	}
	return env.Meta.ID, nil
}

// buildWrite builds Write's envelope and its write configuration from opts.
func buildWrite(queue, urn string, data any, opts []BuildOption) (*artemis.Envelope, *writeConfig, error) {
	var cfg writeConfig
	eopts := []artemis.EnvelopeOption{artemis.EnvelopeQueue(queue)}
	for _, o := range opts {
		switch o := o.(type) {
		case WriteOption:
			o(&cfg)
		case envelopeOptions:
			eopts = append(eopts, o...)
		}
	}
	env, err := artemis.NewEnvelope(urn, data, eopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return env, &cfg, nil
}

// WriteEnvelope stores an envelope that is already built in the outbox
// within tx, to be published to queue. Its meta.id must be new to the
// outbox (a second write of one id fails: a unique violation). The
// envelope keeps its own trace id.
func WriteEnvelope(ctx context.Context, tx pgx.Tx, queue string, env *artemis.Envelope, opts ...WriteOption) error {
	var cfg writeConfig
	for _, o := range opts {
		o(&cfg)
	}
	return write(ctx, tx, queue, env, &cfg)
}

const insertOutbox = `INSERT INTO babelqueue_outbox (message_id, queue, urn, group_id, headers, body, deliver_at)
VALUES ($1, $2, $3, NULLIF($4, ''), $5, $6,
        CASE WHEN $7::bigint > 0 THEN now() + $7::bigint * interval '1 microsecond' END)`

// checkQueue refuses a blank queue name, and a fully qualified one
// (address::queue, Artemis splitting at the first "::") with a blank part.
func checkQueue(queue string) error {
	if strings.TrimSpace(queue) == "" {
		return fmt.Errorf("%w: the queue name is blank", ErrInvalid)
	}
	if addr, q, ok := strings.Cut(queue, "::"); ok && (strings.TrimSpace(addr) == "" || strings.TrimSpace(q) == "") {
		return fmt.Errorf("%w: the queue name %q is address::queue with a blank part", ErrInvalid, queue)
	}
	return nil
}

func write(ctx context.Context, tx pgx.Tx, queue string, env *artemis.Envelope, cfg *writeConfig) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	if env == nil {
		return fmt.Errorf("%w: no envelope", ErrInvalid)
	}
	if err := env.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if env.Meta.ID == "" {
		return fmt.Errorf("%w: the envelope has no meta.id", ErrInvalid)
	}
	body, err := env.Encode()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var headers []byte
	if len(cfg.headers) > 0 {
		if headers, err = json.Marshal(cfg.headers); err != nil {
			return fmt.Errorf("%w: headers: %w", ErrInvalid, err)
		}
	}
	delay := int64(0)
	if cfg.delay > 0 {
		delay = cfg.delay.Microseconds()
	}
	if _, err := tx.Exec(ctx, insertOutbox, env.Meta.ID, queue, env.URN, cfg.groupID, headers, body, delay); err != nil {
		return fmt.Errorf("babelqueue/postgres: outbox write %s: %w", env.Meta.ID, err)
	}
	return nil
}
