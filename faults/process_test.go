package faults_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// The consumer process of TestFaultConsumerProcessKilled: this test
// binary run again with BQFAULT_CHILD=consume (child_test.go).
const faultChildWork = 2 * time.Millisecond

// faultChildConsume consumes BQFAULT_QUEUE on ARTEMIS_URL with a supervised
// Client.Consume (default options, 4 handlers) until SIGTERM. Each handler
// call appends "S <unix ns> <meta.id>" to BQFAULT_LOG when it starts and
// "D <unix ns> <meta.id>" when it is about to return nil (runFaultChild's
// log: a SIGKILL loses no line that was written).
func faultChildConsume() int {
	return runFaultChild("fault child", func(record faultRecord) (*artemis.Consumer, error) {
		return artemis.NewConsumer(artemis.Handlers{faultURN: func(_ context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			record("S", env.Meta.ID)
			time.Sleep(faultChildWork) // the handler's work
			record("D", env.Meta.ID)
			return nil
		}}, artemis.WithConcurrency(faultChildWorkers))
	})
}

// faultChildLog feeds the child's log lines into a ledger as they come.
type faultChildLog struct {
	*faultTail
	l       *ledger.Ledger
	pending map[string][]func(bool) // meta.id -> ends of calls in progress
	lastS   time.Time               // the newest start line
}

// line books one line of the log.
func (cl *faultChildLog) line(t *testing.T, parts []string, at time.Time) {
	t.Helper()
	require.Len(t, parts, 3, "child log line %q", strings.Join(parts, " "))
	id := parts[2]
	switch parts[0] {
	case "S":
		cl.pending[id] = append(cl.pending[id], cl.l.Start(id))
		cl.lastS = at
	case "D":
		ends := cl.pending[id]
		require.NotEmpty(t, ends, "an end without a start for %s", id)
		ends[0](true)
		cl.pending[id] = ends[1:]
	}
}

// killed books a SIGKILL: the calls in progress are a cut, and they never
// end well.
func (cl *faultChildLog) killed(slack int) int {
	n := cl.l.Cut(slack)
	for id, ends := range cl.pending {
		for _, end := range ends {
			end(false)
		}
		delete(cl.pending, id)
	}
	return n
}

// TestFaultConsumerProcessKilled: a consumer process (this test binary
// run again, a supervised Client.Consume with 4 handlers) is SIGKILLed
// three times mid-stream over 6,000 messages and started again each time.
// Every message is handled; a message is handled twice only if it was in a
// handler at a kill, or its accept was in flight (one per handler
// goroutine): the bound.
func TestFaultConsumerProcessKilled(t *testing.T) {
	fb := requireFaultBroker(t)
	const total = 6000
	killAt := []int{1500, 3000, 4500} // handled ok before each kill
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q := faultQueue("proc")
	l := ledger.New()
	faultFill(t, ctx, fb, q, total, l)

	logPath := t.TempDir() + "/handled.log"
	cl := &faultChildLog{l: l, pending: map[string][]func(bool){}}
	cl.faultTail = newFaultTail(t, logPath, func(parts []string, at time.Time) { cl.line(t, parts, at) })
	status := func() string { return fmt.Sprintf("handled %d of %d", l.Handled(), total) }
	poll := func(until func() bool, what string, within time.Duration) { cl.poll(t, until, what, within, status) }
	child := startFaultChild(t, faultModeConsume, q, logPath)
	var perKill []string
	var resumes []time.Duration
	for i, at := range killAt {
		poll(func() bool { return l.Handled() >= at }, fmt.Sprintf("%d handled before kill %d", at, i+1), 3*time.Minute)
		killedAt := child.kill(t)
		cl.read(t) // the last lines the dead process wrote
		inHandler := cl.killed(faultChildWorkers)
		perKill = append(perKill, fmt.Sprintf("kill %d at %d handled: %d in a handler", i+1, l.Handled(), inHandler))
		child = startFaultChild(t, faultModeConsume, q, logPath)
		poll(func() bool { return cl.lastS.After(killedAt) }, fmt.Sprintf("a handler start after kill %d", i+1), 2*time.Minute)
		resumes = append(resumes, cl.lastS.Sub(killedAt))
	}
	poll(func() bool { return l.Handled() >= total }, "every message handled", 3*time.Minute)
	child.stop(t)
	cl.read(t)
	faultRecordLeft(t, fb.Broker, l, q)

	var longest time.Duration
	parts := make([]string, 0, len(resumes))
	for _, d := range resumes {
		longest = max(longest, d)
		parts = append(parts, strconv.FormatInt(d.Milliseconds(), 10))
	}
	faultReport(t, l, "consumer process SIGKILLed 3 times",
		fmt.Sprintf("resume %d ms (longest, SIGKILL to the new process's first handler start; each: %s ms)", longest.Milliseconds(), strings.Join(parts, ", ")),
		strings.Join(perKill, "; "))
	assert.Equal(t, total, l.Handled(), "every message handled")
}
