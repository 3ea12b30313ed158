package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// publishSegment sends n messages from the side's c publishing goroutines
// (publishers), each its share, and returns once all of them are done.
func (r *runner) publishSegment(ctx context.Context, sd *side, c, n int) (result, error) {
	if sd.publishers == nil {
		sd.publishers = r.startPublishers(ctx, sd, c)
	}
	ps := sd.publishers
	if len(ps.todo) != c {
		return result{}, fmt.Errorf("a segment of %d publishers on a side that started %d", c, len(ps.todo))
	}
	sw := startStopwatch()
	for i, todo := range ps.todo {
		todo <- split(n, c, i)
	}
	errs := make([]error, c)
	for i := range c {
		errs[i] = <-ps.done
	}
	return sw.result(n), errors.Join(errs...)
}

// publishers are a side's c publishing goroutines, started at its first
// segment (under its pprof labels) and kept until the measurement ends: a
// segment times the publishes, not the start of c goroutines. A goroutine
// started afresh for each segment grew its stack to a publish's depth
// again every time (newstack, copystack), which a service's long-lived
// workers pay once: the library's deeper call to go-amqp twice (2 KiB,
// 4 KiB, 8 KiB), raw go-amqp's once, c times a segment. They publish with
// the first segment's ctx: a side's segments share its measurement's
// context (measure) and its pprof labels.
type publishers struct {
	todo []chan int // each goroutine's messages for the segment
	done chan error // one result per goroutine per segment
	wg   sync.WaitGroup
}

func (r *runner) startPublishers(ctx context.Context, sd *side, c int) *publishers {
	ps := &publishers{todo: make([]chan int, c), done: make(chan error, c)}
	for i := range c {
		ps.todo[i] = make(chan int, 1)
		ps.wg.Go(func() {
			for k := range ps.todo[i] {
				ps.done <- r.publishN(ctx, sd, c, i, k)
			}
		})
	}
	return ps
}

// stop ends the goroutines, once they are done with their last segment.
func (ps *publishers) stop() {
	for _, todo := range ps.todo {
		close(todo)
	}
	ps.wg.Wait()
}

// publishN is one publishing goroutine's share of a segment: n messages,
// goroutine i of c.
func (r *runner) publishN(ctx context.Context, sd *side, c, i, n int) error {
	data := r.data
	for j := range n {
		var err error
		if sd.lib {
			data.OrderID = 100000 + j
			_, err = sd.pub.Publish(ctx, artemis.Job(urn, data))
		} else {
			msg := r.rawMsgs[(i+j*c)%len(r.rawMsgs)]
			if r.cfg.rawJSON {
				data.OrderID = 100000 + j
				if msg, err = buildRaw(data, sd.queue); err != nil {
					return err
				}
			}
			err = sd.snd.Send(ctx, msg, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pipelinedSegment sends n messages from one goroutine without waiting for
// each outcome (the library's PublishWithReceipt, go-amqp's
// SendWithReceipt) and hands the receipts to this goroutine through a
// channel of window places; it waits for each in order. Both sides have the
// same structure, so the same transfers in flight (window, plus the one
// being waited on and the one being written).
func (r *runner) pipelinedSegment(ctx context.Context, sd *side, window, n int) (result, error) {
	sw := startStopwatch()
	errc := make(chan error, 1)
	var waitErr error
	if sd.lib {
		receipts := make(chan *artemis.Receipt, window)
		go func() {
			defer close(receipts)
			data := r.data
			for j := range n {
				data.OrderID = 100000 + j
				rc, err := sd.pub.PublishWithReceipt(ctx, artemis.Job(urn, data))
				if err != nil {
					errc <- err
					return
				}
				receipts <- rc
			}
		}()
		for rc := range receipts {
			if err := rc.Wait(ctx); err != nil && waitErr == nil {
				waitErr = err
			}
		}
	} else {
		receipts := make(chan amqp.SendReceipt, window)
		go func() {
			defer close(receipts)
			for j := range n {
				msg := r.rawMsgs[j%len(r.rawMsgs)]
				var err error
				if r.cfg.rawJSON {
					data := r.data
					data.OrderID = 100000 + j
					if msg, err = buildRaw(data, sd.queue); err != nil {
						errc <- err
						return
					}
				}
				rc, err := sd.snd.SendWithReceipt(ctx, msg, nil)
				if err != nil {
					errc <- err
					return
				}
				receipts <- rc
			}
		}()
		for rc := range receipts {
			state, err := rc.Wait(ctx)
			if err == nil {
				if _, ok := state.(*amqp.StateAccepted); !ok {
					err = fmt.Errorf("outcome %T", state)
				}
			}
			if err != nil && waitErr == nil {
				waitErr = err
			}
		}
	}
	res := sw.result(n)
	select {
	case err := <-errc:
		return res, err
	default:
	}
	return res, waitErr
}

// consumeSegment accepts at least n messages on the side's receiver with c
// goroutines, and counts them all. Both sides stop taking messages once the
// n-th is counted, and give back one taken after that with a plain release
// (Listen does so itself; the broker hands it out again later); with c > 1 a
// few taken just before may still be handled and counted.
func (r *runner) consumeSegment(ctx context.Context, sd *side, c, n int) (result, error) {
	var count, failures atomic.Int64
	var firstFailure atomic.Value
	done, stop := context.WithCancel(ctx)
	defer stop()
	var err error
	sw := startStopwatch()
	if sd.lib {
		var cons *artemis.Consumer
		cons, err = artemis.NewConsumer(artemis.Handlers{
			urn: func(context.Context, *artemis.Envelope, *amqp.Message) error {
				if count.Add(1) == int64(n) {
					stop()
				}
				return nil
			},
		}, artemis.WithConcurrency(c), artemis.WithOnError(func(_ context.Context, err error, _ *artemis.Envelope, _ *amqp.Message) {
			failures.Add(1)
			firstFailure.CompareAndSwap(nil, err)
		}))
		if err == nil {
			err = cons.Listen(done, sd.rcv)
		}
	} else {
		var wg sync.WaitGroup
		errs := make([]error, c)
		for i := range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					msg, err := sd.rcv.Receive(done, nil)
					if err != nil {
						if done.Err() == nil || ctx.Err() != nil {
							errs[i] = err
						}
						return
					}
					if done.Err() != nil {
						_ = sd.rcv.ReleaseMessage(context.Background(), msg)
						return
					}
					if r.cfg.rawJSON {
						var env rawEnvelope
						body, _ := msg.Value.(string)
						if err := json.Unmarshal([]byte(body), &env); err != nil {
							errs[i] = fmt.Errorf("decode the body: %w", err)
							return
						}
					}
					if err := sd.rcv.AcceptMessage(context.Background(), msg); err != nil {
						errs[i] = err
						return
					}
					if count.Add(1) == int64(n) {
						stop()
					}
				}
			}()
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	got := int(count.Load())
	res := sw.result(got)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return res, fmt.Errorf("%d of %d messages in the segment: %w", got, n, err)
	}
	if f := failures.Load(); f > 0 {
		return res, fmt.Errorf("%d deliveries failed, the first: %v", f, firstFailure.Load())
	}
	if got < n {
		return res, fmt.Errorf("consumed %d messages, want %d", got, n)
	}
	return res, nil
}
