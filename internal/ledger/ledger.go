// Package ledger accounts for every message of a fault scenario by its
// meta.id: what Publish acknowledged, what the broker stored, what the
// handlers saw, and what was left on each queue at the end. The fault
// tests (build tag "faults") fill one Ledger per scenario, then assert on
// its Figures and print its Line.
//
// The words, as the figures use them:
//
//   - acknowledged: a Publish returned nil for the id (Acked), or the test
//     put the message on a queue itself before the faults (Acked too);
//   - stored: copies the broker held for the id, counted by a drain or a
//     browse of a queue (Stored); "stored twice" is every copy beyond the
//     first of one id, over all the Stored calls of a ledger;
//   - handled: a handler call for the id (Start ... done); a call that
//     returned nil is "handled ok" (the Consumer accepts it);
//   - left: copies found on a queue or DLQ at the end (Left);
//   - lost: an acknowledged id that no handler handled ok and that is left
//     nowhere;
//   - handler duplicates: handler calls for an id beyond the calls the
//     scenario expects for it (ExpectCalls, default 1), over every id;
//   - bound: what the duplicates may reach: the deliveries that were in a
//     handler at each fault (Cut), plus the slack the scenario gives per
//     fault, printed apart.
package ledger

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Ledger is safe for concurrent use.
type Ledger struct {
	mu          sync.Mutex
	now         func() time.Time
	expectCalls int
	acked       map[string]bool
	ackedAt     map[string]time.Time // the first Acked of each id
	unknown     map[string]bool      // a Publish returned ErrOutcomeUnknown for it
	calls       map[string]int
	ok          map[string]int
	running     map[string]int
	stored      map[string]int // id -> copies over every Stored call
	storedSeen  bool           // Stored was called
	left        map[string]map[string]int
	leftOrder   []string
	handledOK   int      // ids with a call that returned nil
	waiters     []waiter // WaitHandled calls
	journal     []call   // every handler call, in start order
	cuts        int
	inHandler   int // sum over cuts of the deliveries in a handler
	slack       int // sum over cuts of the per-cut slack

	// resume: the time from each Mark to the next progress of each stream.
	window     int                  // Consume progresses once more than window ids were handled ok after the mark
	markedOK   int                  // handledOK at the Consume mark
	pubWindow  int                  // Publish progresses once more than pubWindow ids were acked after the mark
	markedAck  int                  // len(acked) at the Publish mark
	marked     map[string]time.Time // stream -> pending mark
	resumeMax  map[string]time.Duration
	resumeSeen map[string]int
}

// Streams for Mark and the resume figures.
const (
	Publish = "publish"
	Consume = "consume"
)

// New returns an empty ledger.
func New() *Ledger { return newLedger(time.Now) }

func newLedger(now func() time.Time) *Ledger {
	return &Ledger{
		now: now, expectCalls: 1,
		acked: map[string]bool{}, ackedAt: map[string]time.Time{}, unknown: map[string]bool{}, calls: map[string]int{}, ok: map[string]int{},
		running: map[string]int{}, stored: map[string]int{}, left: map[string]map[string]int{},
		marked: map[string]time.Time{}, resumeMax: map[string]time.Duration{}, resumeSeen: map[string]int{},
	}
}

// ExpectCalls sets the handler calls one id is meant to get (a dead-letter
// scenario whose handler always fails expects max-tries calls).
func (l *Ledger) ExpectCalls(n int) { l.set(&l.expectCalls, n) }

// set stores n in the setting p points to, under the lock.
func (l *Ledger) set(p *int, n int) {
	l.mu.Lock()
	*p = n
	l.mu.Unlock()
}

// Acked records an acknowledged publish of id.
func (l *Ledger) Acked(id string) {
	l.mu.Lock()
	l.acked[id] = true
	if _, ok := l.ackedAt[id]; !ok {
		l.ackedAt[id] = l.now()
	}
	if len(l.acked) > l.markedAck+l.pubWindow {
		l.progress(Publish)
	}
	l.mu.Unlock()
}

// Unknown records a publish of id whose outcome was unknown.
func (l *Ledger) Unknown(id string) {
	l.mu.Lock()
	l.unknown[id] = true
	l.mu.Unlock()
}

// IsAcked reports whether id was acknowledged.
func (l *Ledger) IsAcked(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked[id]
}

// Start records a handler call for id; done records its end, ok when the
// handler returned nil.
func (l *Ledger) Start(id string) (done func(ok bool)) {
	l.mu.Lock()
	l.calls[id]++
	l.running[id]++
	idx := len(l.journal)
	l.journal = append(l.journal, call{start: l.now()})
	l.mu.Unlock()
	var once sync.Once
	return func(ok bool) {
		once.Do(func() {
			l.mu.Lock()
			l.journal[idx].end = l.now()
			if l.running[id]--; l.running[id] == 0 {
				delete(l.running, id)
			}
			if ok {
				if l.ok[id]++; l.ok[id] == 1 {
					l.handledOK++
					l.wake()
					if l.handledOK > l.markedOK+l.window {
						l.progress(Consume)
					}
				}
			}
			l.mu.Unlock()
		})
	}
}

// call is one handler call's span; end is zero while it runs.
type call struct{ start, end time.Time }

type waiter struct {
	n  int
	ch chan struct{}
}

func (l *Ledger) wake() {
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if l.handledOK >= w.n {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	l.waiters = kept
}

// Handled is the number of ids a handler handled ok.
func (l *Ledger) Handled() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handledOK
}

// HandledAtLeast returns a channel closed once n ids were handled ok.
func (l *Ledger) HandledAtLeast(n int) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if l.handledOK >= n {
		close(ch)
		return ch
	}
	l.waiters = append(l.waiters, waiter{n, ch})
	return ch
}

// Calls is the number of handler calls so far.
func (l *Ledger) Calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Total(l.calls)
}

// Total sums a map's counts.
func Total[K comparable](m map[K]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// Running is the number of handler calls in progress.
func (l *Ledger) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runningLocked()
}

func (l *Ledger) runningLocked() int {
	n := 0
	for _, c := range l.running {
		n += c
	}
	return n
}

// Cut records a fault under the handlers: the deliveries in a handler now
// join the bound, plus slack. It returns those in a handler.
func (l *Ledger) Cut(slack int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.runningLocked()
	l.cuts++
	l.inHandler += n
	l.slack += slack
	return n
}

// CutAround runs fault (a reset, a kill) and records it as a cut: the
// bound gains every delivery that was in a handler just before or just
// after fault ran (a handler in progress across the fault, or one that
// ended or began while it ran), plus slack. It returns that number.
func (l *Ledger) CutAround(slack int, fault func()) int {
	l.mu.Lock()
	ids := make(map[string]int, len(l.running))
	for id, c := range l.running {
		ids[id] = c
	}
	l.mu.Unlock()
	fault()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, c := range l.running {
		ids[id] = max(ids[id], c)
	}
	n := 0
	for _, c := range ids {
		n += c
	}
	l.cuts++
	l.inHandler += n
	l.slack += slack
	return n
}

// CutAt records a fault that struck at `at` and that the consumer saw at
// seen (a loss event; seen = at when it saw it at once): the bound gains
// the handler calls in progress at `at` and those that started after it
// up to seen (on a connection nobody knew was dead yet: their accepts went
// nowhere), plus slack. It returns the two numbers.
func (l *Ledger) CutAt(at, seen time.Time, slack int) (inHandler, blind int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.journal {
		switch {
		case !c.start.After(at) && (c.end.IsZero() || c.end.After(at)):
			inHandler++
		case c.start.After(at) && !c.start.After(seen):
			blind++
		}
	}
	l.cuts++
	l.inHandler += inHandler + blind
	l.slack += slack
	return inHandler, blind
}

// AddSlack adds n to the bound's slack without a cut (what a scenario
// learns only after the fault: handlers that started on a connection
// nobody knew was dead yet).
func (l *Ledger) AddSlack(n int) {
	l.mu.Lock()
	l.slack += n
	l.mu.Unlock()
}

// Mark starts a resume measurement on each stream: the time from now to
// the stream's next progress: a new id acknowledged beyond PublishWindow,
// a new id handled ok beyond ConsumeWindow.
func (l *Ledger) Mark(streams ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range streams {
		l.marked[s] = l.now()
		switch s {
		case Consume:
			l.markedOK = l.handledOK
		case Publish:
			l.markedAck = len(l.acked)
		}
	}
}

// PublishWindow makes Publish progress only once more than n new ids were
// acknowledged after a Mark: outcomes the client had already read when the
// fault came (one per publishing goroutine at most) are no sign that
// publishing resumed.
func (l *Ledger) PublishWindow(n int) { l.set(&l.pubWindow, n) }

// ConsumeWindow makes Consume progress only once more than n new ids were
// handled ok after a Mark: deliveries already prefetched when the fault
// came (credit, plus those in a handler) can be handled without the
// connection, so they are no sign that consuming resumed.
func (l *Ledger) ConsumeWindow(n int) { l.set(&l.window, n) }

func (l *Ledger) progress(stream string) {
	at, ok := l.marked[stream]
	if !ok {
		return
	}
	delete(l.marked, stream)
	d := l.now().Sub(at)
	l.resumeSeen[stream]++
	if d > l.resumeMax[stream] {
		l.resumeMax[stream] = d
	}
}

// Resume is the longest time from a Mark to the stream's next progress,
// and whether a mark is still waiting for progress.
func (l *Ledger) Resume(stream string) (longest time.Duration, pending bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, pending = l.marked[stream]
	return l.resumeMax[stream], pending
}

// Stored records the copies of each id the broker held on one queue (a
// drain or a browse): copies maps meta.id to copies.
func (l *Ledger) Stored(copies map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.storedSeen = true
	for id, n := range copies {
		l.stored[id] += n
	}
}

// Left records the copies found on place (a queue or a DLQ) at the end.
func (l *Ledger) Left(place string, copies map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.left[place]
	if !ok {
		m = map[string]int{}
		l.left[place] = m
		l.leftOrder = append(l.leftOrder, place)
	}
	for id, n := range copies {
		m[id] += n
	}
}

// Figures are the counts at the time of the call.
type Figures struct {
	Acked             int            // ids acknowledged
	Unknown           int            // ids whose publish had an unknown outcome (and were never acknowledged)
	StoredIDs         int            // distinct ids stored
	StoredTwice       int            // copies beyond one per id, over the Stored calls
	StoredForeign     int            // stored ids that were never acknowledged (nor unknown)
	Handled           int            // distinct ids handled ok
	Calls             int            // handler calls
	HandlerDuplicates int            // calls beyond ExpectCalls per id
	Lost              int            // acknowledged ids neither handled ok nor left anywhere
	Left              map[string]int // place -> copies left
	LeftOrder         []string
	Cuts              int
	InHandlerAtCuts   int
	Slack             int
}

// Bound is InHandlerAtCuts plus Slack.
func (f Figures) Bound() int { return f.InHandlerAtCuts + f.Slack }

// Figures counts.
func (l *Ledger) Figures() Figures {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := Figures{Acked: len(l.acked), Left: map[string]int{}, LeftOrder: append([]string(nil), l.leftOrder...),
		Cuts: l.cuts, InHandlerAtCuts: l.inHandler, Slack: l.slack}
	for id := range l.unknown {
		if !l.acked[id] {
			f.Unknown++
		}
	}
	for id, n := range l.stored {
		if n > 0 {
			f.StoredIDs++
		}
		if n > 1 {
			f.StoredTwice += n - 1
		}
		if !l.acked[id] && !l.unknown[id] {
			f.StoredForeign++
		}
	}
	for id, n := range l.calls {
		f.Calls += n
		if n > l.expectCalls {
			f.HandlerDuplicates += n - l.expectCalls
		}
		if l.ok[id] > 0 {
			f.Handled++
		}
	}
	for place, m := range l.left {
		f.Left[place] += 0
		for _, n := range m {
			f.Left[place] += n
		}
	}
	for id := range l.acked {
		if l.lostLocked(id) {
			f.Lost++
		}
	}
	return f
}

// Line is the one line a scenario prints:
//
//	fault: <scenario>: lost 0, stored twice 0, handler duplicates N (bound M = X in a handler at K cuts + S slack), resume ..., acked ..., <extra>
//
// extra are further "name value" figures, appended in order.
func (l *Ledger) Line(scenario string, extra ...string) string {
	f := l.Figures()
	var b strings.Builder
	storedTwice := fmt.Sprint(f.StoredTwice)
	l.mu.Lock()
	if !l.storedSeen { // nothing drained before consuming: a second copy would show as a handler duplicate
		storedTwice += " (copies not counted apart: see handler duplicates)"
	}
	l.mu.Unlock()
	fmt.Fprintf(&b, "fault: %s: lost %d, stored twice %s, handler duplicates %d (bound %d = %d in a handler at %d cuts + %d slack)",
		scenario, f.Lost, storedTwice, f.HandlerDuplicates, f.Bound(), f.InHandlerAtCuts, f.Cuts, f.Slack)
	l.mu.Lock()
	streams := make([]string, 0, len(l.resumeSeen)+len(l.marked))
	seen := map[string]bool{}
	for s := range l.resumeSeen {
		streams = append(streams, s)
		seen[s] = true
	}
	for s := range l.marked {
		if !seen[s] {
			streams = append(streams, s)
		}
	}
	sort.Strings(streams)
	for _, s := range streams {
		_, pending := l.marked[s]
		fmt.Fprintf(&b, ", %s resume %d ms", s, l.resumeMax[s].Milliseconds())
		if pending {
			b.WriteString(" (not resumed yet)")
		}
	}
	l.mu.Unlock()
	fmt.Fprintf(&b, ", acked %d", f.Acked)
	if l.storedSeen {
		fmt.Fprintf(&b, ", stored %d", f.StoredIDs)
	}
	if f.Unknown > 0 {
		fmt.Fprintf(&b, ", unknown outcome %d", f.Unknown)
	}
	if f.StoredForeign > 0 {
		fmt.Fprintf(&b, ", stored but never acked %d", f.StoredForeign)
	}
	fmt.Fprintf(&b, ", handled %d (calls %d)", f.Handled, f.Calls)
	for _, p := range f.LeftOrder {
		fmt.Fprintf(&b, ", left on %s %d", p, f.Left[p])
	}
	for _, e := range extra {
		b.WriteString(", ")
		b.WriteString(e)
	}
	return b.String()
}
