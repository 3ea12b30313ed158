package ledger

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestFiguresCountLostStoredTwiceAndDuplicates(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	l := newLedger(c.now)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		l.Acked(id)
	}
	l.Unknown("x") // never acknowledged, stored once: not foreign
	l.Stored(map[string]int{"a": 1, "b": 2, "c": 1, "x": 1, "z": 1})

	two := l.HandledAtLeast(2)
	l.Start("a")(true)
	assert.Equal(t, 1, l.Handled())
	done := l.Start("b")
	require.Equal(t, 1, l.Running())
	assert.Equal(t, 1, l.Cut(2), "one delivery in a handler at the cut")
	done(false)
	done(true) // a second call of done counts nothing
	select {
	case <-two:
		t.Fatal("two handled ok before b was")
	default:
	}
	l.Start("b")(true)
	<-two
	l.Start("b")(true)
	<-l.HandledAtLeast(2) // already reached: closed at once
	l.Left("q", map[string]int{"c": 1})
	l.Left("q.dlq", map[string]int{})
	// d: handled only by a failing handler, left nowhere: lost. e: never seen: lost.
	l.Start("d")(false)

	f := l.Figures()
	assert.Equal(t, 5, f.Acked)
	assert.Equal(t, 1, f.Unknown)
	assert.Equal(t, 5, f.StoredIDs)
	assert.Equal(t, 1, f.StoredTwice)
	assert.Equal(t, 1, f.StoredForeign, "z")
	assert.Equal(t, 2, f.Handled, "a and b")
	assert.Equal(t, 5, f.Calls)
	assert.Equal(t, 2, f.HandlerDuplicates, "b three times")
	assert.Equal(t, 2, f.Lost, "d and e")
	assert.Equal(t, 3, f.Bound())
	assert.Equal(t, map[string]int{"q": 1, "q.dlq": 0}, f.Left)
	assert.Equal(t, 0, l.Running())
}

func TestExpectCallsMovesTheDuplicateLine(t *testing.T) {
	l := New()
	l.ExpectCalls(2)
	l.Acked("a")
	l.Start("a")(false)
	l.Start("a")(false)
	assert.Zero(t, l.Figures().HandlerDuplicates)
	l.Start("a")(false)
	assert.Equal(t, 1, l.Figures().HandlerDuplicates)
	assert.Equal(t, 1, l.Figures().Lost, "failed and left nowhere")
	l.Left("q.dlq", map[string]int{"a": 1})
	assert.Zero(t, l.Figures().Lost)
}

func TestResumeIsTheLongestGapFromAMarkToTheNextProgress(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	l := newLedger(c.now)
	l.Acked("before") // no mark: no figure
	l.Mark(Publish, Consume)
	c.t = c.t.Add(300 * time.Millisecond)
	l.Acked("p1")
	c.t = c.t.Add(100 * time.Millisecond)
	l.Acked("p2") // the mark was used up
	l.Mark(Publish)
	c.t = c.t.Add(50 * time.Millisecond)
	l.Acked("p3")
	l.Start("c")(false) // a failed call is no progress
	d, pending := l.Resume(Publish)
	assert.Equal(t, 300*time.Millisecond, d)
	assert.False(t, pending)
	_, pending = l.Resume(Consume)
	assert.True(t, pending, "no handler started since the mark")

	line := l.Line("demo", "rate 10/s")
	assert.True(t, strings.HasPrefix(line, "fault: demo: lost 4, stored twice 0 (copies not counted apart: see handler duplicates), handler duplicates 0 (bound 0 = 0 in a handler at 0 cuts + 0 slack)"), line)
	assert.Contains(t, line, "consume resume 0 ms (not resumed yet)")
	assert.Contains(t, line, "publish resume 300 ms")
	assert.True(t, strings.HasSuffix(line, ", rate 10/s"), line)
}

func TestCutAroundCountsHandlersOnEitherSideOfTheFault(t *testing.T) {
	l := New()
	endA := l.Start("a")
	l.Start("b")(true)
	var endC func(bool)
	n := l.CutAround(4, func() {
		endA(true)          // a ends while the fault runs
		endC = l.Start("c") // c begins while it runs
	})
	assert.Equal(t, 2, n, "a and c")
	endC(true)
	f := l.Figures()
	assert.Equal(t, 1, f.Cuts)
	assert.Equal(t, 2, f.InHandlerAtCuts)
	assert.Equal(t, 6, f.Bound())
}

func TestConsumeResumesBeyondTheWindow(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	l := newLedger(c.now)
	l.ConsumeWindow(2)
	l.Start("old")(true)
	l.Mark(Consume)
	for i, id := range []string{"p1", "p2", "p3"} {
		c.t = c.t.Add(100 * time.Millisecond)
		end := l.Start(id)
		_, pending := l.Resume(Consume)
		assert.True(t, pending, "a start is not progress")
		end(true)
		_, pending = l.Resume(Consume)
		assert.Equal(t, i < 2, pending, "after %s", id)
	}
	d, _ := l.Resume(Consume)
	assert.Equal(t, 300*time.Millisecond, d)
}

func TestCutAtCountsCallsAcrossTheFaultAndBeforeItWasSeen(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	l := newLedger(c.now)
	l.Start("done-before")(true)   // [100, 100]
	endAcross := l.Start("across") // starts at 100
	c.t = time.Unix(102, 0)
	at := c.t
	c.t = time.Unix(103, 0)
	l.Start("blind")(true) // 103: after the fault, before it was seen
	endAcross(true)        // ends at 103
	c.t = time.Unix(105, 0)
	seen := c.t
	c.t = time.Unix(106, 0)
	endLate := l.Start("after") // 106: after it was seen
	in, blind := l.CutAt(at, seen, 4)
	endLate(true)
	assert.Equal(t, 1, in, "across")
	assert.Equal(t, 1, blind, "blind")
	assert.Equal(t, 6, l.Figures().Bound())
}

func TestPublishResumesBeyondTheWindow(t *testing.T) {
	c := &clock{t: time.Unix(100, 0)}
	l := newLedger(c.now)
	l.PublishWindow(1)
	l.Acked("old")
	l.Mark(Publish)
	c.t = c.t.Add(time.Second)
	l.Acked("buffered")
	l.Acked("buffered") // the same id again is not a new one
	_, pending := l.Resume(Publish)
	assert.True(t, pending)
	c.t = c.t.Add(time.Second)
	l.Acked("new")
	d, pending := l.Resume(Publish)
	assert.False(t, pending)
	assert.Equal(t, 2*time.Second, d)
}
