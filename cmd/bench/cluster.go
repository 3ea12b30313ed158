package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The cluster section (-sections cluster): the library on the cluster of
// $ARTEMIS_CLUSTER_URLS (scripts/artemis cluster-start; one URL per member)
// through DialCluster, against one of its members alone through Dial, in
// the same run: the pipelined publish (PublishWithReceipt, window 256) of
// -n messages, then Client.Consume (concurrency 8 per member, credit 100)
// draining them. Each round runs both sides, single first, then cluster;
// the table gives the medians over -rounds rounds of msg/s, the ratio
// cluster/single, and the process CPU per message. On one machine the
// members share its cores: the ratio shows the cost of the fan-out, not
// the scaling a cluster of separate machines gives.

const (
	clusterWindow = 256
	clusterConc   = 8
	clusterCredit = 100
)

type clusterFigures struct{ rate, cpu float64 } // msg/s, µs CPU per message

func (r *runner) cluster() error {
	urls := strings.Fields(os.Getenv("ARTEMIS_CLUSTER_URLS"))
	if len(urls) < 2 {
		return errors.New("the cluster section needs ARTEMIS_CLUSTER_URLS (eval \"$(scripts/artemis cluster-start)\")")
	}
	members := make([][]string, len(urls))
	for i, u := range urls {
		members[i] = []string{u}
	}
	w := r.cfg.out
	fmt.Fprintf(w, "\ncluster: %d members against member 1 alone, %d messages per side, %d rounds (same machine: the members share its cores)\n",
		len(urls), r.cfg.n, r.cfg.rounds)
	var pubS, pubC, conS, conC []clusterFigures
	for round := range r.cfg.rounds {
		for _, side := range []string{"single", "cluster"} {
			ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
			var c *artemis.Client
			var err error
			if side == "single" {
				c, err = artemis.Dial(ctx, urls[:1], nil)
			} else {
				c, err = artemis.DialCluster(ctx, members, nil)
			}
			if err != nil {
				cancel()
				return fmt.Errorf("%s: %w", side, err)
			}
			queue := fmt.Sprintf("%s.cluster.%s.%d", r.cfg.prefix, side, round)
			pub, err := r.clusterPublish(ctx, c, queue)
			if err == nil {
				var con clusterFigures
				con, err = r.clusterConsume(ctx, c, queue)
				if side == "single" {
					pubS, conS = append(pubS, pub), append(conS, con)
				} else {
					pubC, conC = append(pubC, pub), append(conC, con)
				}
			}
			_ = c.Close(context.Background())
			cancel()
			if err != nil {
				return fmt.Errorf("%s round %d: %w", side, round+1, err)
			}
		}
	}
	rate := func(f []clusterFigures) float64 {
		return medianFigures(f, func(x clusterFigures) float64 { return x.rate })
	}
	cpu := func(f []clusterFigures) float64 {
		return medianFigures(f, func(x clusterFigures) float64 { return x.cpu })
	}
	fmt.Fprintf(w, "%-28s %12s %12s %8s %14s %14s\n", "scenario", "single msg/s", "cluster msg/s", "ratio", "single µs CPU", "cluster µs CPU")
	for _, row := range []struct {
		name string
		s, c []clusterFigures
	}{{fmt.Sprintf("publish (window %d)", clusterWindow), pubS, pubC}, {fmt.Sprintf("consume (conc %d/member)", clusterConc), conS, conC}} {
		fmt.Fprintf(w, "%-28s %12.0f %12.0f %8.2f %14.1f %14.1f\n", row.name, rate(row.s), rate(row.c), rate(row.c)/rate(row.s), cpu(row.s), cpu(row.c))
	}
	return nil
}

func medianFigures(f []clusterFigures, field func(clusterFigures) float64) float64 {
	v := make([]float64, len(f))
	for i, x := range f {
		v[i] = field(x)
	}
	return median(v)
}

// measure times fn and the process CPU it took, per message.
func measure(n int, fn func() error) (clusterFigures, error) {
	cpu0, _ := processCPU()
	start := time.Now()
	if err := fn(); err != nil {
		return clusterFigures{}, err
	}
	took := time.Since(start)
	cpu1, _ := processCPU()
	return clusterFigures{rate: float64(n) / took.Seconds(), cpu: float64(cpu1-cpu0) / float64(time.Microsecond) / float64(n)}, nil
}

func (r *runner) clusterPublish(ctx context.Context, c *artemis.Client, queue string) (clusterFigures, error) {
	p, err := c.Publisher(ctx, queue)
	if err != nil {
		return clusterFigures{}, err
	}
	defer func() { _ = p.Close(context.WithoutCancel(ctx)) }()
	return measure(r.cfg.n, func() error {
		pending := make([]*artemis.Receipt, 0, clusterWindow)
		for i := range r.cfg.n {
			rc, err := p.PublishWithReceipt(ctx, artemis.Job(urn, r.data))
			if err != nil {
				return err
			}
			pending = append(pending, rc)
			if len(pending) == clusterWindow || i == r.cfg.n-1 {
				for _, rc := range pending {
					if err := rc.Wait(ctx); err != nil {
						return err
					}
				}
				pending = pending[:0]
			}
		}
		return nil
	})
}

func (r *runner) clusterConsume(ctx context.Context, c *artemis.Client, queue string) (clusterFigures, error) {
	var handled atomic.Int64
	all := make(chan struct{})
	n := int64(r.cfg.n)
	cons, err := artemis.NewConsumer(artemis.Handlers{urn: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}}, artemis.WithConcurrency(clusterConc), artemis.WithCredit(clusterCredit), artemis.WithoutDeadLetter())
	if err != nil {
		return clusterFigures{}, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	f, err := measure(r.cfg.n, func() error {
		go func() {
			done <- c.Consume(cctx, queue, cons)
		}()
		select {
		case <-all:
			return nil
		case err := <-done:
			return fmt.Errorf("consume returned after %d of %d: %w", handled.Load(), n, err)
		case <-ctx.Done():
			return fmt.Errorf("%d of %d consumed: %w", handled.Load(), n, ctx.Err())
		}
	})
	cancel()
	if err == nil {
		err = <-done
	}
	return f, err
}
