// What a publisher sends, and the two ways to send it: Publish waits for
// the broker's outcome, PublishWithReceipt returns once the transfer is
// written. Either takes an envelope already built, a Job (URN and data, the
// envelope built at publish time) or Encoded bytes.

package artemis

import (
	"context"
	"fmt"
	"time"
)

// Outgoing is what a Publisher sends. Three things are one:
//
//   - an *Envelope, already built (forwarded, redriven, or made with
//     NewEnvelope), sent as it is, with its own meta.queue and trace id;
//   - a Job: a URN and its data, whose envelope is built at publish time,
//     with meta.queue the publisher's queue;
//   - Encoded bytes: an envelope's canonical encoding, checked and sent
//     byte for byte (what a transactional outbox's relay sends).
//
// Nothing outside the package implements it.
type Outgoing interface{ outgoing() }

func (*Envelope) outgoing() {}

// Job is the Outgoing of a URN and its data: the envelope is built when it
// is published, as NewEnvelope builds it, with meta.queue the publisher's
// queue and a new trace id unless opts give one (EnvelopeTraceID continues
// a trace; EnvelopeCreatedAt, EnvelopeQueue). data may be a struct, a map,
// a json.RawMessage or nil; it is encoded at publish time, so it must not
// change until the publish returns.
func Job(urn string, data any, opts ...EnvelopeOption) Outgoing {
	return job{urn: urn, data: data, opts: opts}
}

// job is a Job: the arguments of the envelope it stands for.
type job struct {
	urn  string
	data any
	opts []EnvelopeOption
}

func (job) outgoing() {}

// envelope builds the job's envelope for a publisher of queue: pm's own
// (pm.env, its struct data written into pm.data, see marshalData) when pm
// is set, else a new one. The options write to a configuration on the
// heap, and only when there are some: the one without options stays on
// the stack.
func (j job) envelope(queue string, pm *pooledMessage) (*Envelope, error) {
	cfg := envelopeConfig{queue: queue}
	if len(j.opts) > 0 {
		own := &envelopeConfig{queue: queue}
		for _, o := range j.opts {
			o(own)
		}
		cfg = *own
	}
	if pm == nil {
		return newEnvelope(j.urn, j.data, &cfg)
	}
	cfg.scratch = &pm.data
	return &pm.env, pm.env.fill(j.urn, j.data, &cfg)
}

// Encoded is the Outgoing of an envelope that is already encoded: the
// canonical encoding of a valid envelope (what Envelope.Encode returns)
// goes out as the message body exactly as it is, and the section 2
// projection (message-id, correlation-id, URN, creation time, the bq_
// properties) is read from it; WithDuplicateDetection sets _AMQ_DUPL_ID to
// its meta.id. Bytes that do not decode, fail Validate, or are not the
// canonical encoding of the envelope they hold are refused with an error
// matching ErrInvalidEnvelope, and nothing is sent. The bytes are not kept
// after the publish returns.
type Encoded []byte

func (Encoded) outgoing() {}

// Publish sends m and returns its meta.id once the broker accepted the
// transfer: a rejected, released or modified outcome is an error matching
// ErrNotAccepted (when the Sender is an *amqp.Sender, or one with a
// SendOutcome method). opts apply to this publish, after the publisher's
// own.
//
// Publish is PublishWithReceipt followed by Receipt.Wait, with the wait done
// on the calling goroutine. To have many transfers in flight from one
// goroutine, use PublishWithReceipt.
func (p *Publisher) Publish(ctx context.Context, m Outgoing, opts ...PublishOption) (string, error) {
	if p.unusable() {
		return "", errNotBuilt
	}
	cfg := p.config(opts)
	env, body, pm, err := p.outgoing(m, cfg)
	switch {
	case err != nil:
		return "", err
	case env != nil:
		return p.publish(ctx, env, pm, cfg)
	}
	return p.publishEncoded(ctx, body, cfg)
}

// PublishWithReceipt starts the publish of m: it writes the transfer and
// returns at once, without waiting for the broker's outcome: Receipt.Wait
// does that. Everything Publish does to the message (the section 2
// projection, headers, delay, the other options) holds. An error here means
// nothing was sent: the envelope or an option was refused, or the transfer
// could not be written.
//
// Over an *amqp.Sender the transfer is written with SendWithReceipt, which
// blocks while the link has no credit: the transfers in flight are bounded
// by the credit the broker grants the link (Artemis: 1,000 by default).
// Over any other Sender (one with a SendOutcome method, a plain Sender, a
// fake), PublishWithReceipt sends and waits for the outcome before it
// returns, and the receipt is already resolved; a ClientPublisher's
// receipts are pipelined (see Client.Publisher).
//
// Every receipt is resolved, whether or not anyone waits on it: a goroutine
// per link (started when a receipt written on it is pending, gone when none
// is) waits for that link's outcomes in the order its transfers were
// written. A Publisher over an *amqp.Sender has one link; a
// ClientPublisher has one per link it writes on (one per cluster member,
// and a new one after each re-attach), so a link that stops settling holds
// back only its own receipts, and the callbacks of different links may run
// at the same time. The outcome goes to the WithOnOutcome callback when
// there is one; without one, a failure of a receipt whose Wait was never
// called is logged to slog.Default() at warn level, so nothing is lost
// silently. A receipt never waited on is collected as garbage once
// resolved.
//
// Safe for concurrent use when the Sender is (*amqp.Sender is).
func (p *Publisher) PublishWithReceipt(ctx context.Context, m Outgoing, opts ...PublishOption) (*Receipt, error) {
	if p.unusable() {
		return nil, errNotBuilt
	}
	cfg := p.config(opts)
	env, body, pm, err := p.outgoing(m, cfg)
	switch {
	case err != nil:
		return nil, err
	case env != nil:
		return p.publishWithReceipt(ctx, env, pm, cfg)
	}
	return p.publishEncodedWithReceipt(ctx, body, cfg)
}

// outgoing is what a publish of m sends: the envelope (a Job's built now),
// or, when env is nil, the Encoded bytes as they are. A Job's envelope may
// be the one of the pooled message it is to be projected onto, its data
// written into that message's buffer (pm, see pooledFor): it is gone when
// pm is recycled. An error means
// m stands for no envelope and nothing is sent; a Job whose envelope is
// refused is reported to the Observer as a failed publish, and every
// refusal to the WithOnOutcome callback (with the id "").
func (p *Publisher) outgoing(m Outgoing, cfg *publishConfig) (env *Envelope, body Encoded, pm *pooledMessage, err error) {
	switch m := m.(type) {
	case job:
		pm = p.pooledFor(cfg)
		if env, err = m.envelope(p.queue, pm); err != nil {
			pm.recycle()
			cfg.observePublish(p.queue, m.urn, "", time.Time{}, err)
		}
	case *Envelope:
		if env = m; m == nil {
			err = errNilEnvelope
		}
	case Encoded:
		body = m
	default:
		err = errNoOutgoing
	}
	if err != nil {
		// The publish's end, as every refusal is (WithOnOutcome).
		callOnOutcome(cfg.onOutcome, "", err)
		return nil, nil, nil, err
	}
	return env, body, pm, nil
}

// EnvelopeOf is the envelope m stands for, as a publish sends it: an
// *Envelope itself; Encoded bytes decoded and validated (the publish sends
// the bytes, which are its encoding); a Job's envelope built now, with
// defaults applied before the Job's own options (EnvelopeQueue among them
// sets meta.queue, and the Job's EnvelopeTraceID wins over a default one).
// It is for a wrapper that needs the envelope before it publishes, such as
// a tracing publisher; what it returns for a Job is then published as an
// *Envelope. Whatever a publish would refuse as no envelope, it refuses
// with the same error.
func EnvelopeOf(m Outgoing, defaults ...EnvelopeOption) (*Envelope, error) {
	switch m := m.(type) {
	case job:
		if len(defaults) > 0 {
			m.opts = append(defaults[:len(defaults):len(defaults)], m.opts...)
		}
		env, err := m.envelope("", nil)
		if err != nil {
			return nil, err
		}
		return env, nil
	case *Envelope:
		if m == nil {
			return nil, errNilEnvelope
		}
		return m, nil
	case Encoded:
		env, err := Decode(m)
		if err == nil {
			err = env.Validate()
		}
		if err != nil {
			return nil, err
		}
		return env, nil
	}
	return nil, errNoOutgoing
}

var (
	errNilEnvelope = fmt.Errorf("%w: the envelope is nil", ErrInvalidEnvelope)
	errNoOutgoing  = fmt.Errorf("%w: nothing to publish: a nil Outgoing", ErrInvalidEnvelope)
)
