package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

// memory sends memN messages through the pipelined publisher (window 256)
// and then consumes them with Client.Consume (8 workers), and prints the
// live heap after a collection every memEvery messages.
func (r *runner) memory() error {
	cfg, w := r.cfg, r.cfg.out
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	q := cfg.prefix + ".memory"
	fmt.Fprintf(w, "\nmemory: %d messages through PublishWithReceipt (window 256), then Client.Consume (8 workers, default credit); live heap (HeapAlloc after runtime.GC) every %d; %s\n",
		cfg.memN, cfg.memEvery, loadavg())
	conn, sess, err := r.b.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	snd, err := queuelink.Sender(ctx, sess, q)
	if err != nil {
		return err
	}
	pub := artemis.NewPublisher(snd, q)
	receipts := make(chan *artemis.Receipt, 256)
	errc := make(chan error, 1)
	var pubSamples []uint64
	start := time.Now()
	go func() {
		defer close(receipts)
		data := r.data
		for i := range cfg.memN {
			data.OrderID = 100000 + i%100000
			rc, err := pub.PublishWithReceipt(ctx, artemis.Job(urn, data))
			if err != nil {
				errc <- err
				return
			}
			receipts <- rc
		}
	}()
	done := 0
	for rc := range receipts {
		if err := rc.Wait(ctx); err != nil {
			return err
		}
		if done++; done%cfg.memEvery == 0 {
			pubSamples = append(pubSamples, liveHeap())
		}
	}
	select {
	case err := <-errc:
		return err
	default:
	}
	fmt.Fprintf(w, "publish %d in %.0f s (%.0f msg/s); live heap MiB: %s; last / first %.2f (%s)\n", cfg.memN, time.Since(start).Seconds(),
		float64(cfg.memN)/time.Since(start).Seconds(), mibs(pubSamples), float64(pubSamples[len(pubSamples)-1])/float64(pubSamples[0]), loadavg())

	c, err := artemis.Dial(ctx, []string{cfg.url}, nil)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var count atomic.Int64
	sample := make(chan struct{}, 16)
	finished := make(chan struct{})
	cons, err := artemis.NewConsumer(artemis.Handlers{urn: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		n := count.Add(1)
		if n%int64(cfg.memEvery) == 0 {
			sample <- struct{}{}
		}
		if n == int64(cfg.memN) {
			close(finished)
		}
		return nil
	}}, artemis.WithConcurrency(8))
	if err != nil {
		return err
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	consumed := make(chan error, 1)
	start = time.Now()
	go func() { consumed <- c.Consume(cctx, q, cons) }()
	var conSamples []uint64
	for len(conSamples) < cfg.memN/cfg.memEvery {
		select {
		case <-sample:
			conSamples = append(conSamples, liveHeap())
		case err := <-consumed:
			return fmt.Errorf("Client.Consume returned after %d messages: %w", count.Load(), err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	<-finished
	el := time.Since(start)
	stop()
	if err := <-consumed; err != nil {
		return err
	}
	fmt.Fprintf(w, "Client.Consume %d in %.0f s (%.0f msg/s); live heap MiB: %s; last / first %.2f (%s)\n", cfg.memN, el.Seconds(),
		float64(cfg.memN)/el.Seconds(), mibs(conSamples), float64(conSamples[len(conSamples)-1])/float64(conSamples[0]), loadavg())
	if len(pubSamples) == 0 || len(conSamples) == 0 {
		return errors.New("no samples")
	}
	return nil
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func mibs(v []uint64) string {
	s := ""
	for i, b := range v {
		if i > 0 {
			s += " "
		}
		s += strconv.FormatFloat(float64(b)/(1<<20), 'f', 2, 64)
	}
	return s
}
