// The Consumer: its handlers, its options and the check of its
// configuration, done once in NewConsumer. Every consume stage reads it.

package artemis

import (
	"context"
	"fmt"
	"log/slog"

	"time"

	"github.com/Azure/go-amqp"
)

// HandlerFunc handles one message. env carries the reconciled attempts; msg
// is the raw AMQP message; HeadersFromContext(ctx) gives the out-of-band
// headers. Returning nil accepts the message; an error (or a panic) fails
// the attempt.
type HandlerFunc func(ctx context.Context, env *Envelope, msg *amqp.Message) error

// Handlers maps URNs to their handlers.
type Handlers map[string]HandlerFunc

// ErrorHandler receives every error the consumer reports: a *DeliveryError,
// with the envelope when one was decoded (else nil) and the raw message.
type ErrorHandler func(ctx context.Context, err error, env *Envelope, msg *amqp.Message)

// UnknownURNStrategy says what happens to a message whose URN has no
// handler. Delete also drops poison and gated messages, and data that fails
// its schema, instead of writing them to the dead-letter queue.
type UnknownURNStrategy string

// The unknown-URN strategies.
const (
	// UnknownURNFail reports the message and modifies it with
	// delivery-failed, so Artemis counts it toward its own
	// max-delivery-attempts and dead-letter address. The default.
	UnknownURNFail UnknownURNStrategy = "fail"
	// UnknownURNRelease modifies it with delivery-failed, reporting nothing.
	UnknownURNRelease UnknownURNStrategy = "release"
	// UnknownURNDelete accepts (drops) it.
	UnknownURNDelete UnknownURNStrategy = "delete"
	// UnknownURNDeadLetter writes it to the dead-letter queue with reason
	// unknown_urn and accepts it once the write is confirmed.
	UnknownURNDeadLetter UnknownURNStrategy = "dead_letter"
)

// Defaults of the consumer options.
const (
	DefaultMaxTries             = 3
	DefaultDeadLetterTimeout    = 30 * time.Second
	DefaultDeadLetterRetryDelay = time.Second
	DefaultConcurrency          = 1
)

// Consumer routes deliveries to handlers and settles each exactly once, as
// the BabelQueue contract says. It is safe for concurrent use.
type Consumer struct {
	handlers    Handlers
	dlq         Sender
	maxTries    int
	unknown     UnknownURNStrategy
	onError     ErrorHandler
	queue       string
	dlqTimeout  time.Duration
	retryDelay  time.Duration
	concurrency int
	logger      *slog.Logger // nil: see logTo
	observer    Observer
	payload     PayloadValidator // nil: no payload check (WithPayloadValidator)
	// schedule is the wait before a failed message's next attempt (nil:
	// at once); retrySender is where its scheduled copy goes (nil: every
	// retry is at once); scheduleSet: the schedule was chosen by an option.
	schedule    RetrySchedule
	retrySender Sender
	scheduleSet bool
	now         func() time.Time
	// after is the clock the dead-letter retry hold waits on (time.After; a
	// test gives a channel it controls).
	after func(time.Duration) <-chan time.Time
	err   error // an invalid option, returned by Listen and Handle

	// memory is the attempts of the messages retried at once; a cluster
	// Client's Consume gives every member's loop one shared memory
	// (cluster_attempts.go).
	memory *attemptMemory
	// limit bounds a Consume (WithMaxMessages, WithStopWhenIdle;
	// consume_limit.go); nil elsewhere.
	limit *consumeLimit
	// run is what only Client.Consume and Subscribe read.
	run consumeOptions
}

// consumeOptions are the options only Client.Consume and Subscribe read
// (client_consume.go); Listen ignores them.
type consumeOptions struct {
	credit       int           // WithCredit; 0: the default
	selector     string        // WithSelector
	onlyHandled  bool          // WithOnlyHandledURNs
	noDeadLetter bool          // WithoutDeadLetter
	maxMessages  int           // WithMaxMessages; 0: no limit
	stopWhenIdle time.Duration // WithStopWhenIdle; 0: never
	nonDurable   bool          // WithNonDurable
	// creditBytes is WithCreditBytes's budget (creditBytesSet: given).
	creditBytes    int64
	creditBytesSet bool
}

// ConsumerOption configures a Consumer: every option given to NewConsumer.
// WithObserver and WithPayloadValidator are PublishOptions too.
type ConsumerOption interface{ applyConsumer(c *Consumer) }

// SharedOption is an option a Consumer and a publisher (or one publish)
// both take: WithObserver and WithPayloadValidator. It is a ConsumerOption
// and a PublishOption.
type SharedOption interface {
	ConsumerOption
	PublishOption
}

// consumerOption is the ConsumerOption of a function.
type consumerOption func(*Consumer)

func (f consumerOption) applyConsumer(c *Consumer) { f(c) }

// WithDeadLetterSender sets the sender that dead-letter copies go to, a link
// to <queue>.dlq (or an anonymous link: copies carry to = <queue>.dlq). It
// should send unsettled, so the broker's outcome confirms each write. Without
// it, messages that would be dead-lettered are accepted (dropped) and
// reported. Client.Consume attaches one of its own (unless
// WithoutDeadLetter). Default: none.
func WithDeadLetterSender(s Sender) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.dlq = s })
}

// WithMaxTries sets how many attempts a failing message gets before it is
// dead-lettered, counted by the reconciled attempts whether the retries
// are scheduled copies or immediate redeliveries (see WithRetrySchedule).
// Keep it below Artemis's max-delivery-attempts. Default: DefaultMaxTries
// (3).
func WithMaxTries(n int) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.maxTries = n })
}

// WithRetrySchedule sets how long a message whose handler failed waits
// before its next attempt (see RetrySchedule; WithRetryBackoff is the usual
// growing schedule). A positive wait publishes the next attempt as a copy
// scheduled on the queue (x-opt-delivery-time, body attempts + 1) through
// the retry sender, and accepts the failed delivery once the broker
// accepted the copy: nothing waits in this process. A wait of 0 or less,
// or a nil schedule, retries at once: modified with delivery-failed, the
// broker redelivers it at once. maxTries counts attempts either way.
// Default: DefaultRetryBackoff (10s, 30s, ... capped at 10m, 20% jitter).
func WithRetrySchedule(s RetrySchedule) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.schedule, c.scheduleSet = s, true })
}

// WithRetryBackoff sets a growing retry schedule: attempt n waits
// b.Initial*b.Multiplier^n, capped at b.Max, shortened by up to b.Jitter
// of itself at random. b must pass b.Validate. A schedule of hours is
// fine: the wait is the broker's. Default: DefaultRetryBackoff.
func WithRetryBackoff(b Backoff) ConsumerOption {
	return consumerOption(func(c *Consumer) {
		if err := b.Validate(); err != nil {
			c.err = fmt.Errorf("retry backoff: %w", err)
			return
		}
		c.schedule, c.scheduleSet = backoffSchedule(b), true
	})
}

// WithRetrySender sets the sender that scheduled retry copies go to: a
// link to the queue the consumer receives from (or an anonymous link:
// copies carry to = that queue). It should send unsettled, so the broker's
// outcome confirms each copy. Client.Consume attaches one of its own.
// Without it, Listen and Handle retry every failure at once (modified with
// delivery-failed), whatever the schedule; when the schedule was set by
// WithRetrySchedule or WithRetryBackoff, Listen says so at warn as it
// starts. Default: none.
func WithRetrySender(s Sender) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.retrySender = s })
}

// WithUnknownURN sets the unknown-URN strategy. Default: UnknownURNFail.
func WithUnknownURN(s UnknownURNStrategy) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.unknown = s })
}

// WithOnError sets the callback that receives every reported error. It is
// called from the goroutine handling the delivery; a panic in it is
// recovered and logged. With a callback and no WithLogger, the callback is
// the report: nothing is logged. Default: none.
func WithOnError(fn ErrorHandler) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.onError = fn })
}

// WithQueue names the logical queue: dead_letter.original_queue, and the DLQ
// address <queue>.dlq. Default: the receiver's address.
func WithQueue(name string) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.queue = name })
}

// WithDeadLetterTimeout bounds how long a dead-letter write may wait for the
// broker's outcome; past it the write has failed.
// Default: DefaultDeadLetterTimeout (30s).
func WithDeadLetterTimeout(d time.Duration) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.dlqTimeout = d })
}

// WithDeadLetterRetryDelay sets how long a delivery whose dead-letter write
// failed is held before its plain release, so a broken DLQ is not a hot
// loop; a delivery whose scheduled retry copy failed is held as long before
// its immediate retry. Default: DefaultDeadLetterRetryDelay (1s).
func WithDeadLetterRetryDelay(d time.Duration) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.retryDelay = d })
}

// WithConcurrency sets how many handlers Listen runs at once; 1 keeps the
// queue's order. Deliveries that share an AMQP group-id are still handled
// one at a time, in the order received (see Listen). Give the receiver at
// least this much credit (Client.Consume does). Default: DefaultConcurrency
// (1).
func WithConcurrency(n int) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.concurrency = n })
}

// WithLogger sets a structured logger: settlements at debug, reported errors
// at warn (a retry, a dead-letter copy) and error (a drop, a failed
// dead-letter write, a failed settlement), each with a short fixed message
// ("handler failed, retrying") and the queue, urn, message_id, trace_id,
// attempts, disposition and error (the cause) as attributes; never a
// payload.
//
// Without WithLogger and without WithOnError, the warn and error lines go
// to slog.Default() (the debug lines do not), so nothing is dropped,
// dead-lettered or left unsettled silently. With WithOnError and no
// WithLogger nothing is logged: the callback is the report. A panic in the
// callback or in the Observer is always logged at error, to slog.Default()
// when there is no logger. To log nothing at all, pass
// slog.New(slog.DiscardHandler). Default: nil, the warn and error lines
// to slog.Default() unless WithOnError is given.
func WithLogger(l *slog.Logger) ConsumerOption {
	return consumerOption(func(c *Consumer) { c.logger = l })
}

// WithObserver sets the Observer: given to NewConsumer, it hears every
// settlement of the Consumer; given to NewPublisher, Client.Publisher or
// Client.TopicPublisher, every publish of that publisher; given to one
// publish, that publish (in place of the publisher's). It is a
// ConsumerOption and a PublishOption. Default: none.
func WithObserver(o Observer) SharedOption {
	return observerOption{o}
}

// observerOption is WithObserver.
type observerOption struct{ o Observer }

func (w observerOption) applyConsumer(c *Consumer)     { c.observer = w.o }
func (w observerOption) applyPublish(c *publishConfig) { c.observer = w.o }

// WithPayloadValidator checks data against the schema v holds for its URN.
// It is a ConsumerOption and a PublishOption.
//
// Given to NewConsumer, it checks the data of every decoded message against the
// schema v holds for its URN, after the version gate, the decode and the
// routing, before the handler. Invalid data never reaches the handler, and
// it is not retried (it will not become valid): it is written at once to
// the dead-letter queue with reason failed, the violations in error and
// exception *artemis.PayloadError, and reported as ErrInvalidPayload.
// Without a dead-letter sender, or under UnknownURNDelete, it is accepted
// (dropped) and reported, as a poison message is. A URN without a schema,
// or without a handler, is not checked. A panic in v is a failed attempt
// (a *PanicError), handled as a handler's is. The check ends with the
// consume (Listen's or Handle's context): a message whose check was cut
// short is released unhandled. A nil v checks nothing.
//
// Given to NewPublisher, Client.Publisher, Client.TopicPublisher or one
// publish, it checks the data of every publish before anything is sent:
// invalid data is refused with a *PayloadError (matching ErrInvalidPayload)
// naming each violation, and the broker never sees it. It applies to Publish, PublishWithReceipt and
// NewMessage. The check runs under the publish's context (NewMessage's
// under none), and a publish whose context ends during it fails with the
// context's error. It runs on the caller's goroutine, as code the caller
// runs: a panic in v goes up to the caller, and a v that ends the goroutine
// (runtime.Goexit, as t.FailNow does) ends the caller's, before anything is
// sent, the Observer told or a receipt made. A nil v checks nothing.
// Default: none.
func WithPayloadValidator(v PayloadValidator) SharedOption {
	return payloadOption{v}
}

// payloadOption is WithPayloadValidator.
type payloadOption struct{ v PayloadValidator }

func (w payloadOption) applyConsumer(c *Consumer)     { c.payload = w.v }
func (w payloadOption) applyPublish(c *publishConfig) { c.payload = w.v }

// NewConsumer returns a Consumer that routes to h, configured by opts. The
// configuration is checked here, once: a nil handler or an invalid option
// value is an error matching ErrInvalidConfig, and no Consumer.
func NewConsumer(h Handlers, opts ...ConsumerOption) (*Consumer, error) {
	c := newConsumer(h, opts)
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

func newConsumer(h Handlers, opts []ConsumerOption) *Consumer {
	c := &Consumer{
		handlers:    make(Handlers, len(h)),
		maxTries:    DefaultMaxTries,
		unknown:     UnknownURNFail,
		dlqTimeout:  DefaultDeadLetterTimeout,
		retryDelay:  DefaultDeadLetterRetryDelay,
		concurrency: DefaultConcurrency,
		schedule:    backoffSchedule(DefaultRetryBackoff()),
		memory:      newAttemptMemory(attemptMemoryCap),
		now:         time.Now,
		after:       time.After,
	}
	for urn, fn := range h {
		if fn == nil {
			c.err = fmt.Errorf("%w: the handler for %q is nil", ErrInvalidConfig, urn)
		}
		c.handlers[urn] = fn
	}
	for _, o := range opts {
		o.applyConsumer(c)
	}
	switch {
	case c.err != nil:
	case c.maxTries < 1:
		c.err = fmt.Errorf("%w: max tries is %d, want >= 1", ErrInvalidConfig, c.maxTries)
	case c.concurrency < 1:
		c.err = fmt.Errorf("%w: concurrency is %d, want >= 1", ErrInvalidConfig, c.concurrency)
	case c.dlqTimeout <= 0:
		c.err = fmt.Errorf("%w: dead-letter timeout is %v, want > 0", ErrInvalidConfig, c.dlqTimeout)
	case c.retryDelay < 0:
		c.err = fmt.Errorf("%w: dead-letter retry delay is %v, want >= 0", ErrInvalidConfig, c.retryDelay)
	case c.run.credit < 0:
		c.err = fmt.Errorf("%w: credit is %d, want >= 0", ErrInvalidConfig, c.run.credit)
	case c.run.creditBytesSet && c.run.creditBytes < 1:
		c.err = fmt.Errorf("%w: credit bytes is %d, want >= 1", ErrInvalidConfig, c.run.creditBytes)
	case c.run.maxMessages < 0:
		c.err = fmt.Errorf("%w: max messages is %d, want >= 0", ErrInvalidConfig, c.run.maxMessages)
	case c.run.stopWhenIdle < 0:
		c.err = fmt.Errorf("%w: stop-when-idle is %v, want >= 0", ErrInvalidConfig, c.run.stopWhenIdle)
	case c.unknown != UnknownURNFail && c.unknown != UnknownURNRelease &&
		c.unknown != UnknownURNDelete && c.unknown != UnknownURNDeadLetter:
		c.err = fmt.Errorf("%w: unknown-URN strategy %q", ErrInvalidConfig, string(c.unknown))
	}
	return c
}

// queueName is the queue option, else the receiver's address.
func (c *Consumer) queueName(r Receiver) string {
	if c.queue != "" {
		return c.queue
	}
	if a, ok := r.(interface{ Address() string }); ok {
		return a.Address()
	}
	return ""
}

func (c *Consumer) report(ctx context.Context, err error, env *Envelope, msg *amqp.Message) {
	if c.onError == nil {
		return
	}
	defer recoverHook(c.logger, "error callback panicked")
	c.onError(ctx, err, env, msg)
}
