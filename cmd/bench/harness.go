package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"strconv"

	"github.com/Azure/go-amqp"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

type runner struct {
	b                    *broker
	cfg                  *config
	data                 payload
	rawMsgs              []*amqp.Message
	qRaw, qLib           string
	qUngrouped, qGrouped string
	queued               map[string]int // messages in each queue, as far as this run knows
}

// side is one side of a measurement: its connection and link.
type side struct {
	lib    bool
	name   string
	queue  string
	labels pprof.LabelSet
	conn   *amqp.Conn
	snd    *amqp.Sender
	pub    *artemis.Publisher
	rcv    *amqp.Receiver
	client *clientSide // client-consume, library side
	// client-publish and client-pipelined, library side: pub is cpub's
	// Publisher, on dialed's connection.
	dialed *artemis.Client
	cpub   *artemis.ClientPublisher
	// publish scenarios: the side's publishing goroutines (publishSegment)
	publishers *publishers
}

func (sd *side) close() {
	if sd.publishers != nil {
		sd.publishers.stop()
	}
	if sd.client != nil {
		_, _ = sd.client.stop()
	}
	if sd.cpub != nil {
		_ = sd.cpub.Close(context.Background())
	}
	if sd.dialed != nil {
		_ = sd.dialed.Close(context.Background())
	}
	if sd.conn != nil {
		_ = sd.conn.Close()
	}
}

// measure moves n messages per side in segments of seg, alternating the
// sides, and returns each side's totals and the library / raw ratio of
// every pair of segments. A consume scenario first tops each side's queue
// up to n messages (not timed).
//
// The sides' goroutines, go-amqp's included, carry the pprof labels
// side=raw|lib (ungrouped|grouped), scenario=<kind>-c<conc>-cr<credit> and
// run=<side>/<scenario>, so a profile can be split with go tool pprof
// -tags and -tagfocus.
func (r *runner) measure(s *scenario, n, seg int) (raw, lib result, pairs []float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.timeout)
	defer cancel()
	var sides [2]*side
	var names [2]string
	names[0], names[1] = s.sideNames()
	for i, isLib := range []bool{false, true} {
		sd := &side{lib: isLib, name: names[i], queue: r.queueOf(s, isLib),
			labels: pprof.Labels("side", names[i], "scenario", s.label(), "run", names[i]+"/"+s.label())}
		sides[i] = sd
		defer sd.close()
		if s.kind == "grouped" {
			sd.lib = true // both columns are the library's Listen
		}
		if s.consumes() {
			if err = r.topUp(ctx, sd.queue, n, s.kind == "grouped" && isLib); err != nil {
				return raw, lib, nil, fmt.Errorf("fill %s: %w", sd.queue, err)
			}
		}
		pprof.Do(ctx, sd.labels, func(ctx context.Context) { err = r.open(ctx, sd, s) })
		if err != nil {
			return raw, lib, nil, fmt.Errorf("%s: %w", sd.name, err)
		}
	}
	totals := [2]*result{&raw, &lib}
	for i := 0; raw.n < n || lib.n < n; i++ {
		// raw, lib, lib, raw, raw, lib...: neither side always goes first.
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		var got [2]result
		for _, j := range order {
			sd, k := sides[j], min(seg, n-totals[j].n)
			if k <= 0 {
				continue
			}
			pprof.Do(ctx, sd.labels, func(ctx context.Context) {
				switch {
				case s.publishes():
					got[j], err = r.publishSegment(ctx, sd, s.conc, k)
				case s.pipelines():
					got[j], err = r.pipelinedSegment(ctx, sd, s.conc, k)
				case sd.client != nil:
					got[j], err = sd.client.segment(ctx, k)
				default:
					got[j], err = r.consumeSegment(ctx, sd, s.conc, k)
				}
			})
			if err != nil {
				return raw, lib, nil, fmt.Errorf("%s after %d of %d messages: %w", sd.name, totals[j].n, n, err)
			}
			totals[j].add(got[j])
			if s.consumes() {
				r.queued[sd.queue] -= got[j].n
			} else {
				r.queued[sd.queue] += got[j].n
			}
		}
		if got[0].n > 0 && got[1].n > 0 {
			pairs = append(pairs, got[1].rate()/got[0].rate())
		}
	}
	for _, sd := range sides {
		if sd.client != nil {
			// Handlers held at the end of the last segment accept their
			// messages, untimed.
			extra, err := sd.client.stop()
			r.queued[sd.queue] -= extra
			if err != nil {
				return raw, lib, pairs, fmt.Errorf("Client.Consume: %w", err)
			}
		}
	}
	return raw, lib, pairs, nil
}

func (r *runner) queueOf(s *scenario, lib bool) string {
	switch {
	case s.kind == "grouped" && lib:
		return r.qGrouped
	case s.kind == "grouped":
		return r.qUngrouped
	case lib:
		return r.qLib
	}
	return r.qRaw
}

// topUp publishes (not timed) until queue holds at least n messages: the
// library's envelopes, each in one of -groups message groups when grouped.
func (r *runner) topUp(ctx context.Context, queue string, n int, grouped bool) error {
	k := n - r.queued[queue]
	if k <= 0 {
		return nil
	}
	conn, sess, err := r.b.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	snd, err := queuelink.Sender(ctx, sess, queue)
	if err != nil {
		return err
	}
	pub := artemis.NewPublisher(snd, queue)
	receipts := make(chan *artemis.Receipt, 256)
	errc := make(chan error, 1)
	go func() {
		defer close(receipts)
		data := r.data
		for i := range k {
			data.OrderID = 100000 + i%100000
			var opts []artemis.PublishOption
			if grouped {
				opts = append(opts, artemis.WithGroupID(groupName(i%r.cfg.groups)))
			}
			rc, err := pub.PublishWithReceipt(ctx, artemis.Job(urn, data), opts...)
			if err != nil {
				errc <- err
				return
			}
			receipts <- rc
		}
	}()
	var werr error
	for rc := range receipts {
		if err := rc.Wait(ctx); err != nil && werr == nil {
			werr = err
		}
	}
	select {
	case err := <-errc:
		return err
	default:
	}
	if werr != nil {
		return werr
	}
	r.queued[queue] += k
	return nil
}

func groupName(i int) string { return "group-" + strconv.Itoa(i) }

// open dials the side's connection and attaches its link; not timed.
func (r *runner) open(ctx context.Context, sd *side, s *scenario) error {
	if s.kind == "client-consume" && sd.lib {
		var err error
		sd.client, err = r.startClient(ctx, sd.queue, s.conc, s.credit)
		return err
	}
	if s.clientPublishes() && sd.lib {
		var err error
		if sd.dialed, err = r.dialClient(ctx, "babelqueue-bench-publisher"); err != nil {
			return err
		}
		if sd.cpub, err = sd.dialed.Publisher(ctx, sd.queue); err != nil {
			return err
		}
		sd.pub = sd.cpub.Publisher
		return nil
	}
	var err error
	var sess *amqp.Session
	if sd.conn, sess, err = r.b.dial(ctx); err != nil {
		return err
	}
	if !s.consumes() {
		if sd.snd, err = queuelink.Sender(ctx, sess, sd.queue); err != nil {
			return err
		}
		sd.pub = artemis.NewPublisher(sd.snd, sd.queue)
		return nil
	}
	credit := s.credit
	if credit == 0 {
		credit = rawDefaultCredit
	}
	sd.rcv, err = queuelink.Receiver(ctx, sess, sd.queue, int32(credit))
	return err
}

// rawDefaultCredit is the raw side's credit against Client.Consume with its
// defaults: rhea's default window, and what the library's default reaches
// at eight workers.
const rawDefaultCredit = 100

// split gives worker i of c its share of n.
func split(n, c, i int) int {
	share := n / c
	if i < n%c {
		share++
	}
	return share
}
