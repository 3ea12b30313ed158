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
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

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
	// clientPublish adds Client.Publisher's publish and pipelined scenarios
	// beside the Publisher's.
	clientPublish bool
	groups        int
	groupConc     int
	latRate       int
	latDur        time.Duration
	latSegments   int // latency segments per side
	memN          int
	memEvery      int
	sections      map[string]bool
	timeout       time.Duration
	cpuprofile    string
	memprofile    string
	out           io.Writer
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
	flag.StringVar(&credits, "credits", "100,1000", "comma-separated receiver link credits of the consume scenarios (empty: none)")
	flag.StringVar(&windows, "windows", "64,256", "comma-separated windows (transfers in flight) of the pipelined publish: PublishWithReceipt against SendWithReceipt (empty: none)")
	flag.StringVar(&consConc, "consume-conc", "1,8", "comma-separated concurrencies of the consume scenarios (Listen against raw receive loops; empty: none)")
	flag.IntVar(&cfg.clientConc, "client-conc", 8, "concurrency of the Client.Consume scenario, at each credit (0: none)")
	flag.BoolVar(&cfg.clientPublish, "client-publish", true, "also measure Client.Publisher (a Dial'ed Client's reconnecting publisher) at each -conc and -windows, against raw go-amqp")
	flag.IntVar(&cfg.groups, "groups", 64, "message groups of the grouped-consume scenario (0: none)")
	flag.IntVar(&cfg.groupConc, "group-conc", 8, "concurrency of the grouped-consume scenario (both sides)")
	flag.IntVar(&cfg.latRate, "latency-rate", 2000, "messages per second of the latency measurement")
	flag.DurationVar(&cfg.latDur, "latency-duration", 20*time.Second, "duration of the latency measurement per side")
	flag.IntVar(&cfg.latSegments, "latency-segments", 4, "segments per side of the latency measurement (the sides rotate segment by segment)")
	flag.IntVar(&cfg.memN, "mem-n", 1000000, "messages through the pipelined publisher and then Client.Consume in the memory measurement")
	flag.IntVar(&cfg.memEvery, "mem-every", 100000, "live heap sample interval of the memory measurement, in messages")
	flag.StringVar(&sections, "sections", "throughput,latency,memory", "comma-separated sections to run: throughput, latency, memory, cluster (the library on $ARTEMIS_CLUSTER_URLS against its first member alone)")
	flag.BoolVar(&cfg.rawJSON, "raw-json", false, "the raw side does the JSON work a go-amqp user would: the publisher builds every message (json.Marshal of an envelope struct, two fresh UUIDs, a hand-built *amqp.Message) and the consumer json.Unmarshals every body")
	flag.IntVar(&cfg.rawMsgs, "raw-msgs", 1, "distinct prebuilt messages the raw publisher cycles through (1: one message reused for every send; each has its own meta.id, trace id and creation time)")
	flag.IntVar(&cfg.warmup, "warmup", 2000, "messages per side in the unmeasured warm-up round (0: none)")
	flag.StringVar(&conc, "conc", "1,8,32", "comma-separated concurrencies of the synchronous publish scenarios (empty: none)")
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
	case cfg.latRate < 1, cfg.latDur <= 0, cfg.latSegments < 1, cfg.memN < 1, cfg.memEvery < 1, cfg.clientConc < 0, cfg.groups < 0, cfg.groupConc < 1:
		fatalf("-latency-rate, -latency-duration, -latency-segments, -mem-n, -mem-every and -group-conc must be positive, -client-conc and -groups >= 0")
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

// parseInts parses a comma-separated list of positive integers; an empty
// list is none (its scenarios are left out).
func parseInts(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
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
