package faults_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// The consumer processes of the fault tests are this test binary run
// again with BQFAULT_CHILD set to a mode: init runs that mode's child
// instead of the tests.
const (
	faultChildEnv      = "BQFAULT_CHILD"
	faultChildQueueEnv = "BQFAULT_QUEUE"
	faultChildLogEnv   = "BQFAULT_LOG"
	faultChildWorkers  = 4 // the handler goroutines of the "consume" and "hold" children

	faultModeConsume = "consume" // faultChildConsume, TestFaultConsumerProcessKilled
	faultModeRetry   = "retry"   // faultRetryConsume, TestFaultScheduledRetriesSurviveAConsumerKill
	faultModeHold    = "hold"    // faultChildHold, TestFaultConsumerKilledHoldingCredit
)

func init() {
	switch os.Getenv(faultChildEnv) {
	case faultModeConsume:
		os.Exit(faultChildConsume())
	case faultModeRetry:
		os.Exit(faultRetryConsume())
	case faultModeHold:
		os.Exit(faultChildHold())
	}
}

// faultRecord appends "<kind> <unix ns> <meta.id>" and then each of
// fields, space-separated, as one line to the child's log. The time is
// taken under the log's lock, and every line is one write(2) on an
// O_APPEND file: lines never interleave, and a SIGKILL loses none that
// were written.
type faultRecord func(kind, id string, fields ...any)

// runFaultChild is the body of every consumer child: it opens
// BQFAULT_LOG for appending, dials ARTEMIS_URL (within a minute), builds
// its consumer with newConsumer, which gets the function that writes the
// log, and consumes BQFAULT_QUEUE with a supervised Client.Consume until
// SIGTERM or SIGINT. It returns the process's exit code: 0 after the
// signal, 2 on an error, which it prints on stderr after name.
func runFaultChild(name string, newConsumer func(record faultRecord) (*artemis.Consumer, error)) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, name+":", err); return 2 }
	f, err := os.OpenFile(os.Getenv(faultChildLogEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	var mu sync.Mutex
	record := func(kind, id string, fields ...any) {
		mu.Lock()
		defer mu.Unlock()
		line := fmt.Appendf(nil, "%s %d %s", kind, time.Now().UnixNano(), id)
		for _, v := range fields {
			line = fmt.Appendf(line, " %v", v)
		}
		_, _ = f.Write(append(line, '\n'))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := artemis.Dial(dctx, []string{os.Getenv("ARTEMIS_URL")}, nil)
	cancel()
	if err != nil {
		return fail(err)
	}
	defer c.Close(context.Background())
	cons, err := newConsumer(record)
	if err != nil {
		return fail(err)
	}
	if err := c.Consume(ctx, os.Getenv(faultChildQueueEnv), cons); err != nil {
		return fail(err)
	}
	return 0
}

// faultChild is one run of a consumer process.
type faultChild struct {
	cmd  *exec.Cmd
	done chan error
}

// wait waits for the process to exit and returns how it did (cmd.Wait).
func (c *faultChild) wait() error { return <-c.done }

// startFaultChild starts the consumer process of mode on queue q, writing
// its log to logPath. If it still runs when the test ends, the cleanup
// SIGKILLs it.
func startFaultChild(t *testing.T, mode, q, logPath string) *faultChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), faultChildEnv+"="+mode, faultChildQueueEnv+"="+q, faultChildLogEnv+"="+logPath)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	ch := &faultChild{cmd: cmd, done: make(chan error, 1)}
	go func() { ch.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			// "signal: killed": the kill is the point
			t.Logf("the consumer process, killed at the cleanup: %v", ch.wait())
		}
	})
	return ch
}

// kill SIGKILLs the process and waits for it to exit; it returns the time
// the signal was sent.
func (c *faultChild) kill(t *testing.T) time.Time {
	t.Helper()
	require.NoError(t, c.cmd.Process.Kill())
	at := time.Now()
	require.Error(t, c.wait(), "the child exits by the SIGKILL")
	return at
}

// stop sends the process SIGTERM: it must exit 0 within faultWait.
func (c *faultChild) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-c.done:
		assert.NoError(t, err, "the last consumer process exits 0 on SIGTERM")
	case <-time.After(faultWait):
		t.Fatalf("the consumer process did not exit within %v of SIGTERM", faultWait)
	}
}

// faultTail reads a child's log while the child writes it: each complete
// line goes to got as its fields ("<kind> <unix ns> <meta.id>" and any
// more) and its time.
type faultTail struct {
	r       *bufio.Reader
	partial string
	got     func(parts []string, at time.Time)
}

// newFaultTail makes the empty log at path (the child appends to it) and
// opens it to read; the test's cleanup closes it.
func newFaultTail(t *testing.T, path string, got func(parts []string, at time.Time)) *faultTail {
	t.Helper()
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return &faultTail{r: bufio.NewReader(f), got: got}
}

// read takes every complete line written so far.
func (ft *faultTail) read(t *testing.T) {
	t.Helper()
	for {
		s, err := ft.r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			ft.partial += s
			return
		}
		require.NoError(t, err)
		line := strings.TrimSuffix(ft.partial+s, "\n")
		ft.partial = ""
		parts := strings.Fields(line)
		require.GreaterOrEqual(t, len(parts), 3, "child log line %q", line)
		ns, err := strconv.ParseInt(parts[1], 10, 64)
		require.NoError(t, err)
		ft.got(parts, time.Unix(0, ns))
	}
}

// poll reads the log until until holds; after within it fails the test,
// naming what it waited for and status().
func (ft *faultTail) poll(t *testing.T, until func() bool, what string, within time.Duration, status func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ft.read(t)
		if until() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (%s)", within, what, status())
		}
		time.Sleep(20 * time.Millisecond) // another process writes the log: poll it
	}
}
