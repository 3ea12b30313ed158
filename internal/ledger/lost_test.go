package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLostIDsAreTheLostFiguresWithTheirAckTimes(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	l := newLedger(c.now)
	l.Acked("late") // acknowledged first, again later: the first time counts
	c.t = c.t.Add(time.Second)
	l.Acked("handled")
	l.Acked("left")
	l.Acked("failed")
	c.t = c.t.Add(time.Second)
	l.Acked("late")
	l.Acked("drained-away")
	l.Start("handled")(true)
	l.Start("failed")(false)
	l.Stored(map[string]int{"drained-away": 1})
	l.Left("q", map[string]int{"left": 1})

	lost := l.LostIDs()
	require.Len(t, lost, 3)
	assert.Equal(t, l.Figures().Lost, len(lost))
	assert.Equal(t, Lost{ID: "late", AckedAt: time.Unix(100, 0)}, lost[0])
	assert.Equal(t, Lost{ID: "failed", AckedAt: time.Unix(101, 0), Calls: 1}, lost[1])
	assert.Equal(t, Lost{ID: "drained-away", AckedAt: time.Unix(102, 0), Stored: 1}, lost[2])
}
