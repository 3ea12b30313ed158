package faults_test

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// Who lost a message of an HA phase: the broker pair, or the library.
//
// The Client reports each connection it opens (EventConnected,
// EventReconnected, with the URL) before any publish can use it, and each
// loss (EventDisconnected). A publish the library reported accepted was
// therefore accepted by the node of the last connection opened before it
// returned, unless that connection's loss had been reported already and no
// new one opened: then the library said "accepted" with no broker to say
// it. The phases (the primary's SIGKILL, its restart, the backup handing
// back) are noted on the same clock, so each lost message can be placed
// relative to them. After the phase, the node the test did not drain is
// drained too when it is active (a pair where both are active has split):
// a lost message found there was kept by the broker pair on the wrong
// node.

// haTimeline is the Client's connections and the phase's fault moments on
// one clock. Safe for concurrent use.
type haTimeline struct {
	mu      sync.Mutex
	nodes   map[string]string // host:port -> "primary" / "backup"
	entries []haEntry
}

// haEntry is one connection event or fault moment.
type haEntry struct {
	at   time.Time
	kind string // "open", "lost" (a connection) or "fault" (a moment of the phase)
	node string // the connection's node; the fault's description
}

func newHATimeline(h *brokertest.HAPair) *haTimeline {
	return &haTimeline{nodes: map[string]string{haHostPort(h.Primary.URL): "primary", haHostPort(h.Backup.URL): "backup"}}
}

// haHostPort is the host:port of a broker URL ("" when it has none).
func haHostPort(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// node names the node of an event's URL.
func (tl *haTimeline) node(raw string) string {
	if n, ok := tl.nodes[haHostPort(raw)]; ok {
		return n
	}
	return "an unknown node (" + haHostPort(raw) + ")"
}

// on records a Client's connection event.
func (tl *haTimeline) on(ev artemis.ConnectionEvent) {
	kind := ""
	switch ev.Kind {
	case artemis.EventConnected, artemis.EventReconnected:
		kind = "open"
	case artemis.EventDisconnected:
		kind = "lost"
	default:
		return
	}
	tl.mu.Lock()
	tl.entries = append(tl.entries, haEntry{at: time.Now(), kind: kind, node: tl.node(ev.URL)})
	tl.mu.Unlock()
}

// fault notes a moment of the phase (the zero time: none).
func (tl *haTimeline) fault(at time.Time, what string) {
	if at.IsZero() {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.entries = append(tl.entries, haEntry{at: at, kind: "fault", node: what})
	sort.SliceStable(tl.entries, func(i, j int) bool { return tl.entries[i].at.Before(tl.entries[j].at) })
}

// place says where the library's "accepted" at time at came from: the
// node of the last connection opened by then (connected false when that
// connection's loss was reported before at, or none had opened), and the
// last fault moment before at ("" when none).
func (tl *haTimeline) place(at time.Time) (node string, connected bool, after string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.entries {
		if e.at.After(at) {
			break
		}
		switch e.kind {
		case "open":
			node, connected = e.node, true
		case "lost":
			if e.node == node {
				connected = false
			}
		case "fault":
			after = e.node
		}
	}
	return node, connected, after
}

// haLosses sorts a phase's lost messages by who lost them.
type haLosses struct {
	pair    map[string]int // "accepted by <node> <when>" -> messages the broker pair lost
	library map[string]int // why the library is to blame -> messages
	split   int            // lost messages found on the node the test did not drain
	other   string         // what the drain of that node found, for the message
}

// sortLosses attributes each lost message of l. elsewhere is the copies the
// drain of the other node found (nil: it was not active, other says why).
func sortLosses(tl *haTimeline, l *ledger.Ledger, elsewhere map[string]int, other string) haLosses {
	out := haLosses{pair: map[string]int{}, library: map[string]int{}, other: other}
	for _, lost := range l.LostIDs() {
		node, connected, after := tl.place(lost.AckedAt)
		when := "before the fault"
		if after != "" {
			when = "after " + after
		}
		switch {
		case elsewhere[lost.ID] > 0:
			out.split++
			out.pair[fmt.Sprintf("accepted by the %s %s, still on the node not serving after the phase", node, when)]++
		case lost.Calls > 0:
			out.library[fmt.Sprintf("delivered to a handler %d times, never handled ok, not left on the queue", lost.Calls)]++
		case node == "":
			out.library["reported accepted before the Client had opened any connection"]++
		case !connected:
			out.library[fmt.Sprintf("reported accepted after the loss of its connection to the %s was reported, none open yet (%s)", node, when)]++
		default:
			out.pair[fmt.Sprintf("accepted by the %s %s, missing after the phase", node, when)]++
		}
	}
	return out
}

// total counts the messages of m.
func haTotal(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// haJoin lists m's entries, the largest first.
func haJoin(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, "; ")
}

// String is the losses' part of the phase's line.
func (s haLosses) String() string {
	return fmt.Sprintf("lost by the broker pair %d, lost by the library %d, %s", haTotal(s.pair), haTotal(s.library), s.other)
}

// check fails the test on a loss by either, saying which.
func (s haLosses) check(t *testing.T, scenario string) {
	t.Helper()
	if n := haTotal(s.pair); n > 0 {
		msg := fmt.Sprintf("%s: lost by the broker pair: %d acknowledged messages: %s", scenario, n, haJoin(s.pair))
		if s.split > 0 {
			msg += fmt.Sprintf(" (%d of them on the node that should be passive: both nodes were active, a split brain)", s.split)
		}
		t.Error(msg)
	}
	if n := haTotal(s.library); n > 0 {
		t.Errorf("%s: lost by the library: %d acknowledged messages: %s", scenario, n, haJoin(s.library))
	}
}

// haDrainOther drains the queues on the node b when it is active (its AMQP
// port takes connections): a pair whose other node is active after the
// phase has split. It returns the copies found (nil when b is not active)
// and what it found, for the line.
func haDrainOther(t *testing.T, b *brokertest.Broker, role string, queues ...string) (map[string]int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", haHostPort(b.URL), time.Second)
	if err != nil {
		return nil, fmt.Sprintf("the %s not serving after the phase (not drained)", role)
	}
	_ = c.Close()
	copies := map[string]int{}
	for _, q := range queues {
		for id, n := range faultDrain(t, b, q).copies {
			copies[id] += n
		}
	}
	return copies, fmt.Sprintf("the %s ACTIVE after the phase, holding %d messages of the phase's queues", role, haTotal(copies))
}

// haWaitDone is faultWaitDone without failing the test at once: a pair
// that lost messages never lets the handlers reach their count, and the
// phase's accounting must still say who lost what. It waits up to 3
// minutes for every publish, then up to 3 minutes for every message
// handled, and reports what did not finish as an error.
func haWaitDone(t *testing.T, l *ledger.Ledger, pubDone <-chan struct{}, acked func() int, publishes, consumes int,
	events *faultEvents, mark int,
) {
	t.Helper()
	select {
	case <-pubDone:
	case <-time.After(3 * time.Minute):
		t.Errorf("timed out after 3m0s waiting for every publish (%d of %d)", acked(), publishes)
	}
	select {
	case <-l.HandledAtLeast(consumes):
	case <-time.After(3 * time.Minute):
		t.Errorf("timed out after 3m0s waiting for every message handled (%d of %d); events: %s",
			l.Handled(), consumes, events.summary(mark))
	}
}
