package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
