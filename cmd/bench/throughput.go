package main

import (
	"fmt"
	"slices"
	"time"
)

// The throughput section: the scenarios of the table, their rounds, and the
// table of medians.

// scenario is one line of the table.
type scenario struct {
	kind   string   // publish, pipelined, client-publish, client-pipelined, consume, client-consume or grouped
	conc   int      // goroutines, workers, or the window of a pipelined publish
	credit int      // receiver credit of the consume kinds (client-consume: 0 is no WithCredit, the defaults, against raw at rawDefaultCredit)
	raw    []result // one per round
	lib    []result
	pairs  []float64 // library / raw msg/s of each pair of segments, all rounds
}

func (s *scenario) name() string {
	switch s.kind {
	case "pipelined":
		return fmt.Sprintf("pipelined w=%d", s.conc)
	case "client-publish":
		return fmt.Sprintf("Client.Publisher c=%d", s.conc)
	case "client-pipelined":
		return fmt.Sprintf("Client pipelined w=%d", s.conc)
	case "consume":
		return fmt.Sprintf("consume c=%d cr=%d", s.conc, s.credit)
	case "client-consume":
		if s.credit == 0 {
			return fmt.Sprintf("Client.Consume c=%d defaults", s.conc)
		}
		return fmt.Sprintf("Client.Consume c=%d cr=%d", s.conc, s.credit)
	case "grouped":
		return fmt.Sprintf("grouped c=%d cr=%d", s.conc, s.credit)
	}
	return fmt.Sprintf("%s c=%d", s.kind, s.conc)
}

func (s *scenario) label() string { return fmt.Sprintf("%s-c%d-cr%d", s.kind, s.conc, s.credit) }

func (s *scenario) consumes() bool { return !s.publishes() && !s.pipelines() }

// publishes: synchronous Publish calls from conc goroutines.
func (s *scenario) publishes() bool { return s.kind == "publish" || s.kind == "client-publish" }

// pipelines: PublishWithReceipt with conc receipts in flight.
func (s *scenario) pipelines() bool { return s.kind == "pipelined" || s.kind == "client-pipelined" }

// clientPublishes: the library side publishes through Client.Publisher.
func (s *scenario) clientPublishes() bool {
	return s.kind == "client-publish" || s.kind == "client-pipelined"
}

// sideNames says what the two columns measure: raw go-amqp and the library,
// or, for grouped, the library without and with message groups.
func (s *scenario) sideNames() (string, string) {
	if s.kind == "grouped" {
		return "ungrouped", "grouped"
	}
	return "raw", "lib"
}

// scenarios are the lines of the throughput table, in the order they run.
func (r *runner) scenarios() []*scenario {
	cfg := r.cfg
	var scens []*scenario
	for _, c := range cfg.conc {
		scens = append(scens, &scenario{kind: "publish", conc: c})
		if cfg.clientPublish {
			scens = append(scens, &scenario{kind: "client-publish", conc: c})
		}
	}
	for _, w := range cfg.windows {
		scens = append(scens, &scenario{kind: "pipelined", conc: w})
		if cfg.clientPublish {
			scens = append(scens, &scenario{kind: "client-pipelined", conc: w})
		}
	}
	if cfg.clientConc > 0 {
		// What a user gets with nil options, against raw go-amqp at
		// rawDefaultCredit: first, as BENCHMARKS.md leads with it.
		scens = append(scens, &scenario{kind: "client-consume", conc: cfg.clientConc})
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
		// At the first credit of -credits; at the raw side's default credit
		// when that list is empty.
		credit := rawDefaultCredit
		if len(cfg.credits) > 0 {
			credit = cfg.credits[0]
		}
		scens = append(scens, &scenario{kind: "grouped", conc: cfg.groupConc, credit: credit})
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
