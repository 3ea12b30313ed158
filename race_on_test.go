//go:build race

package artemis

// raceEnabled: the race detector is on. Its sync.Pool drops a share of
// what is put back at random, so an allocation count through a pool
// varies from one measurement to the next.
const raceEnabled = true
