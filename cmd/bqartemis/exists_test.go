package main

import (
	"context"
	"testing"
)

// A fully qualified name is split at its first "::", as Artemis splits it:
// the queue of a::b::c is b::c.
func TestExistsSplitsAtTheFirstSeparator(t *testing.T) {
	q := &queues{names: map[string]bool{"b::c": true, "orders": true}}
	for name, want := range map[string]bool{"a::b::c": true, "topic::orders": true, "orders": true, "a::c": false, "a::b": false} {
		got, err := q.exists(context.Background(), name)
		if err != nil || got != want {
			t.Errorf("exists(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
}
