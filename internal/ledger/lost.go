package ledger

import (
	"sort"
	"time"
)

// Lost is one acknowledged id that no handler handled ok and that is left
// nowhere: when it was acknowledged, and what the handlers and the drains
// saw of it, so a scenario can say who lost it.
type Lost struct {
	ID      string
	AckedAt time.Time // the first Acked of the id
	Calls   int       // handler calls (none returned nil)
	Stored  int       // copies a Stored call counted (then drained away, or left elsewhere)
}

// lostLocked reports whether the acknowledged id is lost: handled ok by no
// handler and left nowhere. l.mu is held.
func (l *Ledger) lostLocked(id string) bool {
	if l.ok[id] > 0 {
		return false
	}
	for _, m := range l.left {
		if m[id] > 0 {
			return false
		}
	}
	return true
}

// LostIDs returns the lost ids (those Figures counts as Lost), the earliest
// acknowledged first.
func (l *Ledger) LostIDs() []Lost {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Lost
	for id := range l.acked {
		if l.lostLocked(id) {
			out = append(out, Lost{ID: id, AckedAt: l.ackedAt[id], Calls: l.calls[id], Stored: l.stored[id]})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].AckedAt.Equal(out[j].AckedAt) {
			return out[i].AckedAt.Before(out[j].AckedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}
