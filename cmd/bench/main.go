// Command bench measures the library end to end against a real Artemis
// broker and compares it with raw go-amqp doing the same work in the same
// run.
//
// Scenarios, each at the concurrencies of -conc (default 1 and 8):
//
//   - publish: Publisher.Publish of a ≈1 KB envelope (a struct whose padding
//     makes the encoded envelope -size bytes) against (*amqp.Sender).Send of
//     one prebuilt *amqp.Message, built once by artemis.NewMessage from the
//     same data (same body size, durable header, priority, properties and
//     annotations) and reused for every send. c goroutines share one sender.
//     With -raw-msgs k the raw side cycles through k such messages instead.
//   - consume: Consumer.Listen with a handler that only counts, accepting
//     each message, against c goroutines calling Receive + AcceptMessage on
//     one receiver. Both receivers have credit -credit (default 100).
//
// With -raw-json the raw side also does the JSON work a go-amqp user
// exchanging the same envelopes would do: its publisher builds every message
// (encoding/json of an envelope struct with two fresh UUIDs, a hand-built
// *amqp.Message with the same header, properties and annotations) and its
// consumer unmarshals every body into that struct before accepting it.
//
// Each side has its own connection, session and link per measurement, and
// its own queue (<prefix>.raw and <prefix>.lib); links carry the "queue"
// capability, senders are unsettled (every send waits for the broker's
// disposition) and receivers use the default settle mode.
//
// One measurement moves -n messages per side in segments of -segment
// messages, alternating the sides segment by segment (raw, lib, lib, raw,
// raw, lib, ...), so both see the same load on a shared machine. A round
// measures, for each concurrency, the publish (which fills each side's queue
// with exactly -n messages) and then the consume (which drains exactly those
// -n messages): every consume starts on a pre-filled queue and runs alone.
// The table gives, per scenario, the median over -rounds rounds of each
// side's msg/s (messages / the sum of its segments' times) and their ratio,
// the median of the per-segment ratios, and each side's CPU time per message.
//
// It talks to ARTEMIS_URL (or -url); scripts/bench starts the local broker
// and deletes the queues afterwards.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/google/uuid"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/queuelink"
)

const urn = "urn:babel:bench:order-created"

// payload is the data of every envelope; Pad makes it ≈1 KB.
type payload struct {
	OrderID  int     `json:"order_id"`
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
	Pad      string  `json:"pad"`
}

type config struct {
	url        string
	prefix     string
	n          int
	segment    int
	rounds     int
	size       int
	rawMsgs    int
	rawJSON    bool
	warmup     int
	conc       []int // synchronous publish
	windows    []int // pipelined publish
	consConc   []int // consume
	credits    []int
	clientConc int
	groups     int
	groupConc  int
	latRate    int
	latDur     time.Duration
	memN       int
	memEvery   int
	sections   map[string]bool
	timeout    time.Duration
	cpuprofile string
	memprofile string
	out        io.Writer
}

func main() {
	var cfg config
	var conc, windows, consConc, credits, sections string
	flag.StringVar(&cfg.url, "url", os.Getenv("ARTEMIS_URL"), "broker URL, amqp://user:pass@host:port (default $ARTEMIS_URL)")
	flag.StringVar(&cfg.prefix, "prefix", "", "queue name prefix (default bench.<random>); the queues are <prefix>.raw and <prefix>.lib")
	flag.IntVar(&cfg.n, "n", 20000, "messages per side in each measurement")
	flag.IntVar(&cfg.segment, "segment", 2000, "messages per segment: the sides alternate segment by segment")
	flag.IntVar(&cfg.rounds, "rounds", 3, "rounds; the table reports the medians")
	flag.IntVar(&cfg.size, "size", 1024, "encoded envelope size in bytes (the padding is chosen to reach it)")
	flag.StringVar(&credits, "credits", "100,1000", "comma-separated receiver link credits of the consume scenarios")
	flag.StringVar(&windows, "windows", "64,256", "comma-separated windows (transfers in flight) of the pipelined publish: PublishWithReceipt against SendWithReceipt")
	flag.StringVar(&consConc, "consume-conc", "1,8", "comma-separated concurrencies of the consume scenarios (Listen against raw receive loops)")
	flag.IntVar(&cfg.clientConc, "client-conc", 8, "concurrency of the Client.Consume scenario, at each credit (0: none)")
	flag.IntVar(&cfg.groups, "groups", 64, "message groups of the grouped-consume scenario (0: none)")
	flag.IntVar(&cfg.groupConc, "group-conc", 8, "concurrency of the grouped-consume scenario (both sides)")
	flag.IntVar(&cfg.latRate, "latency-rate", 2000, "messages per second of the latency measurement")
	flag.DurationVar(&cfg.latDur, "latency-duration", 20*time.Second, "duration of the latency measurement per side")
	flag.IntVar(&cfg.memN, "mem-n", 1000000, "messages through the pipelined publisher and then Client.Consume in the memory measurement")
	flag.IntVar(&cfg.memEvery, "mem-every", 100000, "live heap sample interval of the memory measurement, in messages")
	flag.StringVar(&sections, "sections", "throughput,latency,memory", "comma-separated sections to run: throughput, latency, memory, cluster (the library on $ARTEMIS_CLUSTER_URLS against its first member alone)")
	flag.BoolVar(&cfg.rawJSON, "raw-json", false, "the raw side does the JSON work a go-amqp user would: the publisher builds every message (json.Marshal of an envelope struct, two fresh UUIDs, a hand-built *amqp.Message) and the consumer json.Unmarshals every body")
	flag.IntVar(&cfg.rawMsgs, "raw-msgs", 1, "distinct prebuilt messages the raw publisher cycles through (1: one message reused for every send; each has its own meta.id, trace id and creation time)")
	flag.IntVar(&cfg.warmup, "warmup", 2000, "messages per side in the unmeasured warm-up round (0: none)")
	flag.StringVar(&conc, "conc", "1,8,32", "comma-separated concurrencies of the synchronous publish scenarios")
	flag.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "bound on one measurement")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file (labels: side, scenario, run)")
	flag.StringVar(&cfg.memprofile, "memprofile", "", "write an allocation profile at the end to this file")
	flag.Parse()
	cfg.out = os.Stdout

	var err error
	for _, l := range []struct {
		name string
		in   string
		out  *[]int
	}{{"conc", conc, &cfg.conc}, {"windows", windows, &cfg.windows}, {"consume-conc", consConc, &cfg.consConc}, {"credits", credits, &cfg.credits}} {
		if *l.out, err = parseInts(l.in); err != nil {
			fatalf("-%s: %v", l.name, err)
		}
	}
	cfg.sections = map[string]bool{}
	for _, f := range strings.Split(sections, ",") {
		switch f = strings.TrimSpace(f); f {
		case "throughput", "latency", "memory", "cluster":
			cfg.sections[f] = true
		case "":
		default:
			fatalf("-sections: unknown section %q", f)
		}
	}
	switch {
	case cfg.url == "":
		fatalf("no broker: set ARTEMIS_URL or -url (scripts/bench starts the local one)")
	case cfg.n < 1, cfg.segment < 1, cfg.rounds < 1, cfg.rawMsgs < 1, cfg.warmup < 0:
		fatalf("-n, -segment, -rounds and -raw-msgs must be >= 1, -warmup >= 0")
	case cfg.latRate < 1, cfg.latDur <= 0, cfg.memN < 1, cfg.memEvery < 1, cfg.clientConc < 0, cfg.groups < 0, cfg.groupConc < 1:
		fatalf("-latency-rate, -latency-duration, -mem-n, -mem-every and -group-conc must be positive, -client-conc and -groups >= 0")
	}
	if cfg.prefix == "" {
		cfg.prefix = "bench." + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	}
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	if err := run(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile() // os.Exit skips the deferred stop: flush the profile first
		os.Exit(1)             //nolint:gocritic // the profile was stopped just above
	}
	if cfg.memprofile != "" {
		f, err := os.Create(cfg.memprofile)
		if err == nil {
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			_ = f.Close()
		}
		if err != nil {
			fatalf("%v", err)
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(2)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// scenario is one line of the table.
type scenario struct {
	kind   string   // publish, pipelined, consume, client-consume or grouped
	conc   int      // goroutines, workers, or the window of a pipelined publish
	credit int      // receiver credit of the consume kinds
	raw    []result // one per round
	lib    []result
	pairs  []float64 // library / raw msg/s of each pair of segments, all rounds
}

func (s *scenario) name() string {
	switch s.kind {
	case "pipelined":
		return fmt.Sprintf("pipelined w=%d", s.conc)
	case "consume":
		return fmt.Sprintf("consume c=%d cr=%d", s.conc, s.credit)
	case "client-consume":
		return fmt.Sprintf("Client.Consume c=%d cr=%d", s.conc, s.credit)
	case "grouped":
		return fmt.Sprintf("grouped c=%d cr=%d", s.conc, s.credit)
	}
	return fmt.Sprintf("%s c=%d", s.kind, s.conc)
}

func (s *scenario) label() string { return fmt.Sprintf("%s-c%d-cr%d", s.kind, s.conc, s.credit) }

func (s *scenario) consumes() bool { return s.kind != "publish" && s.kind != "pipelined" }

// sideNames says what the two columns measure: raw go-amqp and the library,
// or, for grouped, the library without and with message groups.
func (s *scenario) sideNames() (string, string) {
	if s.kind == "grouped" {
		return "ungrouped", "grouped"
	}
	return "raw", "lib"
}

// result is one side of one measurement.
type result struct {
	n    int
	wall time.Duration // the sum of its segments' wall-clock times
	cpu  time.Duration // this process's CPU time in those segments
}

func (r *result) add(o result) {
	r.n += o.n
	r.wall += o.wall
	r.cpu += o.cpu
}

func (r result) rate() float64 { return float64(r.n) / r.wall.Seconds() }

// cpuPerMsg is in µs.
func (r result) cpuPerMsg() float64 {
	return float64(r.cpu) / float64(time.Microsecond) / float64(r.n)
}

// stopwatch times a segment in wall-clock time and in this process's CPU
// time (user + system, all threads: go-amqp's goroutines included).
type stopwatch struct {
	t0   time.Time
	cpu0 time.Duration
}

func startStopwatch() stopwatch {
	cpu, _ := processCPU()
	return stopwatch{t0: time.Now(), cpu0: cpu}
}

func (w stopwatch) result(n int) result {
	wall := time.Since(w.t0)
	cpu, _ := processCPU()
	return result{n: n, wall: wall, cpu: cpu - w.cpu0}
}

func run(cfg *config) error {
	b, err := newBroker(cfg.url)
	if err != nil {
		return err
	}
	data, rawMsgs, bodyLen, err := fixtures(cfg.size, cfg.rawMsgs)
	if err != nil {
		return err
	}
	w := cfg.out
	r := &runner{b: b, cfg: cfg, data: data, rawMsgs: rawMsgs, qRaw: cfg.prefix + ".raw", qLib: cfg.prefix + ".lib",
		qUngrouped: cfg.prefix + ".ungrouped", qGrouped: cfg.prefix + ".grouped", queued: map[string]int{}}
	fmt.Fprintf(w, "bench: %s; queues %s.*\n", redact(cfg.url), cfg.prefix)
	fmt.Fprintf(w, "bench: %d messages per side per measurement in segments of %d, envelope %d bytes (AMQP value body), durable, %d rounds\n",
		cfg.n, cfg.segment, bodyLen, cfg.rounds)
	fmt.Fprintf(w, "bench: %s, GOMAXPROCS=%d, NumCPU=%d, %s\n", runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), loadavg())
	fmt.Fprintf(w, "memory at start: %s\n", memLine())
	if cfg.sections["throughput"] {
		if err := r.throughput(); err != nil {
			return err
		}
	}
	if cfg.sections["latency"] {
		if err := r.latency(); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if cfg.sections["memory"] {
		if err := r.memory(); err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	if cfg.sections["cluster"] {
		if err := r.cluster(); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	fmt.Fprintf(w, "memory at end: %s\n", memLine())
	fmt.Fprintf(w, "peak RSS (VmHWM): %s\n", procStatus("VmHWM"))
	return nil
}

// scenarios are the lines of the throughput table, in the order they run.
func (r *runner) scenarios() []*scenario {
	cfg := r.cfg
	var scens []*scenario
	for _, c := range cfg.conc {
		scens = append(scens, &scenario{kind: "publish", conc: c})
	}
	for _, w := range cfg.windows {
		scens = append(scens, &scenario{kind: "pipelined", conc: w})
	}
	for _, cr := range cfg.credits {
		for _, c := range cfg.consConc {
			scens = append(scens, &scenario{kind: "consume", conc: c, credit: cr})
		}
		if cfg.clientConc > 0 {
			scens = append(scens, &scenario{kind: "client-consume", conc: cfg.clientConc, credit: cr})
		}
	}
	if cfg.groups > 0 {
		scens = append(scens, &scenario{kind: "grouped", conc: cfg.groupConc, credit: cfg.credits[0]})
	}
	return scens
}

func (r *runner) throughput() error {
	cfg, w := r.cfg, r.cfg.out
	scens := r.scenarios()
	if cfg.warmup > 0 {
		start := time.Now()
		n := min(cfg.warmup, cfg.n)
		for _, s := range scens {
			if _, _, _, err := r.measure(s, n, min(cfg.segment, max(n/2, 1))); err != nil {
				return fmt.Errorf("warm-up %s: %w", s.name(), err)
			}
		}
		fmt.Fprintf(w, "warm-up: every scenario once with %d messages per side, %.1f s (not counted)\n", n, time.Since(start).Seconds())
	}
	start := time.Now()
	for round := 1; round <= cfg.rounds; round++ {
		for _, s := range scens {
			raw, lib, pairs, err := r.measure(s, cfg.n, cfg.segment)
			if err != nil {
				return fmt.Errorf("round %d %s: %w", round, s.name(), err)
			}
			s.raw = append(s.raw, raw)
			s.lib = append(s.lib, lib)
			s.pairs = append(s.pairs, pairs...)
			a, b := s.sideNames()
			fmt.Fprintf(w, "round %d  %-24s %s %7.0f msg/s %5.1f µs CPU/msg   %s %7.0f msg/s %5.1f µs CPU/msg   ratio %.3f  segment pairs: median %.3f, min %.3f, max %.3f  (%s)\n",
				round, s.name(), a, raw.rate(), raw.cpuPerMsg(), b, lib.rate(), lib.cpuPerMsg(), lib.rate()/raw.rate(),
				median(pairs), slices.Min(pairs), slices.Max(pairs), loadavg())
		}
		fmt.Fprintf(w, "round %d  memory: %s\n", round, memLine())
	}

	fmt.Fprintf(w, "\nmedians of %d rounds (%.0f s), %d messages per side per measurement, %s:\n",
		cfg.rounds, time.Since(start).Seconds(), cfg.n, loadavg())
	fmt.Fprintf(w, "%-24s %10s %10s %7s %13s %8s  %11s %11s\n", "scenario", "raw msg/s", "lib msg/s", "ratio", "round range", "paired", "raw µs CPU", "lib µs CPU")
	for _, s := range scens {
		rate := func(r result) float64 { return r.rate() }
		cpu := func(r result) float64 { return r.cpuPerMsg() }
		mr, ml := medianOf(s.raw, rate), medianOf(s.lib, rate)
		ratios := make([]float64, len(s.raw))
		for i := range s.raw {
			ratios[i] = s.lib[i].rate() / s.raw[i].rate()
		}
		fmt.Fprintf(w, "%-24s %10.0f %10.0f %7.3f %6.3f–%.3f %8.3f  %11.1f %11.1f\n", s.name(), mr, ml, ml/mr,
			slices.Min(ratios), slices.Max(ratios), median(s.pairs), medianOf(s.raw, cpu), medianOf(s.lib, cpu))
	}
	fmt.Fprintln(w, "ratio: median library msg/s / median raw msg/s (grouped: grouped / ungrouped, both the library). round range: the lowest and highest per-round ratio. paired: median of library / raw over every pair of adjacent segments.")
	fmt.Fprintln(w, "µs CPU: this process's user + system CPU time per message (median of the rounds); the broker's is not in it.")
	if ml, mr := r.syncC1(scens); ml > 0 {
		for _, s := range scens {
			if s.kind == "pipelined" {
				fmt.Fprintf(w, "%s: library %.0f msg/s = %.1fx the library's synchronous publish c=1 (%.0f msg/s; raw c=1 %.0f)\n",
					s.name(), medianOf(s.lib, func(r result) float64 { return r.rate() }), medianOf(s.lib, func(r result) float64 { return r.rate() })/ml, ml, mr)
			}
		}
	}
	return nil
}

// syncC1 is the median msg/s of the synchronous publish at c=1, library and
// raw (0 when it was not measured).
func (r *runner) syncC1(scens []*scenario) (lib, raw float64) {
	for _, s := range scens {
		if s.kind == "publish" && s.conc == 1 {
			return medianOf(s.lib, func(r result) float64 { return r.rate() }), medianOf(s.raw, func(r result) float64 { return r.rate() })
		}
	}
	return 0, 0
}

// fixtures returns the data of the library's envelopes, padded so the
// encoded envelope is about size bytes, and the raw side's k messages: the
// library's own projections of envelopes of the same data.
func fixtures(size, k int) (payload, []*amqp.Message, int, error) {
	data := payload{OrderID: 100000, Amount: 99.9, Currency: "USD"}
	env, err := artemis.NewEnvelope(urn, data, artemis.EnvelopeQueue("bench"))
	if err != nil {
		return data, nil, 0, err
	}
	body, err := env.Encode()
	if err != nil {
		return data, nil, 0, err
	}
	if pad := size - len(body); pad > 0 {
		data.Pad = strings.Repeat("x", pad)
	}
	msgs := make([]*amqp.Message, k)
	for i := range msgs {
		env, err = artemis.NewEnvelope(urn, data, artemis.EnvelopeQueue("bench"))
		if err != nil {
			return data, nil, 0, err
		}
		if msgs[i], err = artemis.NewMessage(env); err != nil {
			return data, nil, 0, err
		}
	}
	s, _ := msgs[0].Value.(string)
	return data, msgs, len(s), nil
}

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
}

func (sd *side) close() {
	if sd.client != nil {
		_, _ = sd.client.stop()
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
				case s.kind == "publish":
					got[j], err = r.publishSegment(ctx, sd, s.conc, k)
				case s.kind == "pipelined":
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
			var opts []artemis.BuildOption
			if grouped {
				opts = append(opts, artemis.WithGroupID(groupName(i%r.cfg.groups)))
			}
			rc, err := pub.PublishWithReceipt(ctx, urn, data, opts...)
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
	sd.rcv, err = queuelink.Receiver(ctx, sess, sd.queue, int32(s.credit))
	return err
}

// split gives worker i of c its share of n.
func split(n, c, i int) int {
	share := n / c
	if i < n%c {
		share++
	}
	return share
}

// publishSegment sends n messages from c goroutines on the side's sender.
func (r *runner) publishSegment(ctx context.Context, sd *side, c, n int) (result, error) {
	var wg sync.WaitGroup
	errs := make([]error, c)
	sw := startStopwatch()
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data := r.data
			for j := range split(n, c, i) {
				var err error
				if sd.lib {
					data.OrderID = 100000 + j
					_, err = sd.pub.Publish(ctx, urn, data)
				} else {
					msg := r.rawMsgs[(i+j*c)%len(r.rawMsgs)]
					if r.cfg.rawJSON {
						data.OrderID = 100000 + j
						if msg, err = buildRaw(data, sd.queue); err != nil {
							errs[i] = err
							return
						}
					}
					err = sd.snd.Send(ctx, msg, nil)
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return sw.result(n), errors.Join(errs...)
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
				rc, err := sd.pub.PublishWithReceipt(ctx, urn, data)
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

// broker dials one connection with SASL PLAIN from the URL's credentials.
type broker struct {
	addr string
	opts amqp.ConnOptions
}

func newBroker(raw string) (*broker, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("broker URL: %w", err)
	}
	b := &broker{opts: amqp.ConnOptions{ContainerID: "babelqueue-bench"}}
	if u.User != nil {
		pass, _ := u.User.Password()
		b.opts.SASLType = amqp.SASLTypePlain(u.User.Username(), pass)
		u.User = nil
	}
	b.addr = u.String()
	return b, nil
}

func (b *broker) dial(ctx context.Context) (*amqp.Conn, *amqp.Session, error) {
	opts := b.opts
	conn, err := amqp.Dial(ctx, b.addr, &opts)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", b.addr, err)
	}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("begin a session: %w", err)
	}
	return conn, sess, nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = url.User(u.User.Username())
	return u.String()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianOf(rs []result, field func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = field(r)
	}
	return median(v)
}

// memLine is the heap in use after a collection, and the process's RSS.
func memLine() string {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return fmt.Sprintf("heap in use after GC %.1f MiB, %d goroutines, RSS %s",
		float64(ms.HeapInuse)/(1<<20), runtime.NumGoroutine(), procStatus("VmRSS"))
}

// procStatus reads one field of /proc/self/status ("n/a" elsewhere).
func procStatus(field string) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.Atoi(f[0]); err == nil {
					return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
				}
			}
			return strings.TrimSpace(v)
		}
	}
	return "n/a"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average n/a"
	}
	return "load average " + strings.Join(f[:3], " ")
}

// rawEnvelope and rawMeta are the envelope as a go-amqp user would write it
// with encoding/json, for -raw-json.
type rawEnvelope struct {
	Job      string  `json:"job"`
	TraceID  string  `json:"trace_id"`
	Data     payload `json:"data"`
	Meta     rawMeta `json:"meta"`
	Attempts int     `json:"attempts"`
}

type rawMeta struct {
	ID            string `json:"id"`
	Queue         string `json:"queue"`
	Lang          string `json:"lang"`
	SchemaVersion int    `json:"schema_version"`
	CreatedAt     int64  `json:"created_at"`
}

var rawContentType = artemis.ContentType

// buildRaw makes the message -raw-json sends: the same body, header,
// properties, application properties and annotations as the library's, but
// built by hand with encoding/json and github.com/google/uuid.
func buildRaw(data payload, queue string) (*amqp.Message, error) {
	now := time.Now()
	subject := urn
	env := rawEnvelope{Job: urn, TraceID: uuid.NewString(), Data: data,
		Meta: rawMeta{ID: uuid.NewString(), Queue: queue, Lang: artemis.Lang, SchemaVersion: artemis.SchemaVersion, CreatedAt: now.UnixMilli()}}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	created := time.UnixMilli(env.Meta.CreatedAt).UTC()
	return &amqp.Message{
		Header:      &amqp.MessageHeader{Durable: true, Priority: 4},
		Annotations: amqp.Annotations{artemis.AnnotationJMSType: urn},
		Properties: &amqp.MessageProperties{
			MessageID:     env.Meta.ID,
			CorrelationID: env.TraceID,
			ContentType:   &rawContentType,
			Subject:       &subject,
			CreationTime:  &created,
		},
		ApplicationProperties: map[string]any{
			artemis.PropSchemaVersion: "1",
			artemis.PropSourceLang:    artemis.Lang,
			artemis.PropAttempts:      "0",
			artemis.PropAppID:         artemis.AppID,
		},
		Value: string(body),
	}, nil
}
