package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// The attribution of the HA phases' losses, on a made-up timeline (no
// broker): each lost message goes to the broker pair or to the library by
// where and when it was reported accepted.
func TestHALossesAreSortedByWhoLostThem(t *testing.T) {
	h := &brokertest.HAPair{
		Primary: &brokertest.Broker{URL: "amqp://u:p@127.0.0.1:1001"},
		Backup:  &brokertest.Broker{URL: "amqp://u:p@127.0.0.1:1003"},
	}
	tl := newHATimeline(h)
	l := ledger.New()
	tl.on(artemis.ConnectionEvent{Kind: artemis.EventConnected, URL: "amqp://u:xxxxx@127.0.0.1:1003"})
	l.Acked("on-backup") // then missing: the pair's
	l.Acked("handled")   // handled ok: not lost
	l.Start("handled")(true)
	tl.fault(time.Now(), "the primary's restart")
	tl.on(artemis.ConnectionEvent{Kind: artemis.EventDisconnected, URL: "amqp://u:xxxxx@127.0.0.1:1003"})
	l.Acked("no-connection") // accepted with no connection open: the library's
	tl.on(artemis.ConnectionEvent{Kind: artemis.EventReconnected, URL: "amqp://u:xxxxx@127.0.0.1:1001"})
	l.Acked("split")   // found on the other node: the pair's
	l.Acked("dropped") // delivered, never handled ok: the library's
	l.Start("dropped")(false)
	l.Acked("left") // left on a queue: not lost
	l.Left("q", map[string]int{"left": 1})

	s := sortLosses(tl, l, map[string]int{"split": 1}, "the backup ACTIVE after the phase")
	assert.Equal(t, map[string]int{
		"accepted by the backup before the fault, missing after the phase":                                   1,
		"accepted by the primary after the primary's restart, still on the node not serving after the phase": 1,
	}, s.pair)
	assert.Equal(t, map[string]int{
		"reported accepted after the loss of its connection to the backup was reported, none open yet (after the primary's restart)": 1,
		"delivered to a handler 1 times, never handled ok, not left on the queue":                                                    1,
	}, s.library)
	assert.Equal(t, 1, s.split)
	assert.Equal(t, "lost by the broker pair 2, lost by the library 2, the backup ACTIVE after the phase", s.String())
}
