package main

import "time"

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
