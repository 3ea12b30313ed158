package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// headerList is a repeatable -header K=V flag.
type headerList map[string]string

func (h headerList) String() string {
	var parts []string
	for k, v := range h {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (h headerList) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	h[strings.TrimSpace(k)] = v
	return nil
}

// publishFlags are the options of one publish.
type publishFlags struct {
	traceID   string
	delay     time.Duration
	headers   headerList
	group     string
	ttl       time.Duration
	priority  int
	dupDetect bool
}

func (p *publishFlags) check() error {
	switch {
	case p.delay < 0:
		return usagef("-delay %v: want >= 0", p.delay)
	case p.ttl < 0:
		return usagef("-ttl %v: want >= 0 (0: never expires)", p.ttl)
	case p.ttl > 0 && p.ttl < time.Millisecond:
		return usagef("-ttl %v: the header counts milliseconds", p.ttl)
	case p.priority < -1 || p.priority > 9:
		return usagef("-priority %d: want 0 to 9", p.priority)
	}
	return nil
}

// options are the library's publish options the flags map to.
func (p *publishFlags) options() []artemis.PublishOption {
	var opts []artemis.PublishOption
	if p.delay > 0 {
		opts = append(opts, artemis.WithDelay(p.delay))
	}
	if len(p.headers) > 0 {
		opts = append(opts, artemis.WithHeaders(p.headers))
	}
	if p.dupDetect {
		opts = append(opts, artemis.WithDuplicateDetection())
	}
	if p.group != "" {
		opts = append(opts, artemis.WithGroupID(p.group))
	}
	if p.ttl > 0 {
		opts = append(opts, artemis.WithTTL(p.ttl))
	}
	if p.priority >= 0 {
		opts = append(opts, artemis.WithPriority(p.priority))
	}
	return opts
}

// buildPublish makes the envelope and its message for queue.
func buildPublish(queue, urn string, data []byte, p *publishFlags) (*artemis.Envelope, *amqp.Message, error) {
	if strings.TrimSpace(urn) == "" {
		return nil, nil, usagef("the URN is blank")
	}
	data = []byte(strings.TrimSpace(string(data)))
	if len(data) == 0 {
		data = []byte("{}")
	}
	if !json.Valid(data) || data[0] != '{' {
		return nil, nil, usagef("the data is not a JSON object: %s", short(string(data), 80))
	}
	eopts := []artemis.EnvelopeOption{artemis.EnvelopeQueue(queue)}
	if p.traceID != "" {
		eopts = append(eopts, artemis.EnvelopeTraceID(p.traceID))
	}
	env, err := artemis.NewEnvelope(urn, json.RawMessage(data), eopts...)
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	msg, err := artemis.NewMessage(env, p.options()...)
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	return env, msg, nil
}

func setupPublish(fs *flag.FlagSet, env *environment) func(context.Context, []string) error {
	p := publishFlags{headers: headerList{}}
	fs.StringVar(&p.traceID, "trace-id", "", "continue this trace `id` (default: a fresh one)")
	fs.DurationVar(&p.delay, "delay", 0, "deliver after this `duration` (Artemis scheduled delivery, x-opt-delivery-time)")
	fs.Var(p.headers, "header", "out-of-band header `K=V` as a string application property, repeatable")
	fs.StringVar(&p.group, "group", "", "message group `id` (properties.group-id, JMSXGroupID)")
	fs.DurationVar(&p.ttl, "ttl", 0, "time to live (header ttl; Artemis expires the message after it; 0: never)")
	fs.IntVar(&p.priority, "priority", -1, "header priority `0-9` (default 4)")
	fs.BoolVar(&p.dupDetect, "dup-detect", false, "set _AMQ_DUPL_ID to meta.id, so Artemis stores a repeat of this publish once")
	return func(ctx context.Context, args []string) error {
		if len(args) < 2 || len(args) > 3 {
			return usagef("want QUEUE URN [JSON | -], got %d arguments", len(args))
		}
		if err := p.check(); err != nil {
			return err
		}
		queue := strings.TrimSpace(args[0])
		if queue == "" {
			return usagef("the queue is blank")
		}
		var data []byte
		if len(args) == 3 {
			data = []byte(args[2])
			if args[2] == "-" {
				var err error
				if data, err = io.ReadAll(io.LimitReader(env.stdin, 64<<20)); err != nil {
					return fmt.Errorf("read the data from stdin: %w", err)
				}
			}
		}
		e, msg, err := buildPublish(queue, args[1], data, &p)
		if err != nil {
			return err
		}
		ctx, s, err := env.conn.open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		snd, err := queuelink.Sender(ctx, s.sess, queue)
		if err != nil {
			return err
		}
		if err := queuelink.SendAccepted(ctx, snd, msg); err != nil {
			return fmt.Errorf("publish to %s: %w", queue, err)
		}
		_ = snd.Close(ctx)
		fmt.Fprintln(env.stdout, e.Meta.ID)
		return nil
	}
}
