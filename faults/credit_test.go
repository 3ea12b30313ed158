package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
	"github.com/babelqueue/babelqueue-go-artemis/internal/ledger"
)

// The consumer process of TestFaultConsumerKilledHoldingCredit: this test
// binary run again with BQFAULT_CHILD=hold (child_test.go). Its handlers
// never return, so at the kill every delivery it holds is either in a
// handler (started) or waiting on the link's credit (never started).
//
// faultChildHold consumes BQFAULT_QUEUE with Client.Consume and nil
// options (the default credit), faultChildWorkers handlers that append
// "S <unix ns> <meta.id>" to BQFAULT_LOG and then wait for the end.
func faultChildHold() int {
	return runFaultChild("fault child", func(record faultRecord) (*artemis.Consumer, error) {
		return artemis.NewConsumer(artemis.Handlers{faultURN: func(hctx context.Context, env *artemis.Envelope, _ *amqp.Message) error {
			record("S", env.Meta.ID)
			<-hctx.Done()
			return hctx.Err()
		}}, artemis.WithConcurrency(faultChildWorkers))
	})
}

// TestFaultConsumerKilledHoldingCredit: a consumer process with the
// default options holds a full credit window (faultChildWorkers deliveries
// in its handlers, the rest pushed ahead on credit) and is SIGKILLed. Every
// delivery comes back, and at most the window's deliveries come back
// counted as an attempt. Artemis (2.40, AMQP) sometimes counts none of them
// and sometimes every one the process held, the ones no handler started
// too (docs/consuming.md, Credit): the test prints which, and the credit
// bounds it.
func TestFaultConsumerKilledHoldingCredit(t *testing.T) {
	fb := requireFaultBroker(t)
	fb.RequireCLI(t)
	credit := defaultCredit(faultChildWorkers)
	total := credit + 200 // a backlog beyond the window: the window fills
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	q := faultQueue("credit")
	sent := faultSent(t, ctx, fb, q, total, 8, ledger.New())
	require.Len(t, sent, total)

	// A control: one message given back as a failed delivery before the
	// child starts must read a delivery-count of at least 1 in the drain,
	// so a 0 there is the broker's count, not a header the drain failed to
	// read.
	control := faultFailOnce(t, fb.Broker, q)

	logPath := t.TempDir() + "/started.log"
	require.NoError(t, os.WriteFile(logPath, nil, 0o600))
	child := startFaultChild(t, faultModeHold, q, logPath)

	// Every handler holds a delivery and the broker has pushed the whole
	// window: the broker's delivering count is the credit.
	var started map[string]bool
	var stat brokertest.QueueStat
	deadline := time.Now().Add(2 * time.Minute)
	for {
		started = faultStarted(t, logPath)
		var err error
		stat, err = fb.Stat(ctx, q)
		require.NoError(t, err)
		if len(started) == faultChildWorkers && stat.DeliveringCount == credit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child did not fill its window: %d handlers started, delivering %d, want %d and %d",
				len(started), stat.DeliveringCount, faultChildWorkers, credit)
		}
		time.Sleep(100 * time.Millisecond) // another process and the broker's CLI: poll them
	}
	child.kill(t)

	// Every message comes back; read each one's delivery-count.
	counts := faultDeliveryCounts(t, fb.Broker, q, total)
	require.Len(t, counts, total, "every message is back on the queue")
	controlCount, controlStarted := counts[control], started[control]
	require.GreaterOrEqual(t, controlCount, uint32(1), "the control message given back as a failed delivery reads a delivery-count")
	delete(counts, control)
	var startedCounted, heldCounted int
	for id, dc := range counts {
		switch {
		case started[id]:
			if dc > 0 {
				startedCounted++
			}
		case dc > 0:
			heldCounted++
		}
	}
	untouchedCounted := startedCounted + heldCounted
	fmt.Printf("fault: consumer process SIGKILLed holding its default credit %d (%d in handlers): "+
		"counted on return: %d of %d started, %d of %d never started; %d of %d messages counted "+
		"(the control, failed once before: delivery-count %d, in a handler at the kill: %v)\n",
		credit, faultChildWorkers, startedCounted, len(started), heldCounted, credit-faultChildWorkers, untouchedCounted, total,
		controlCount, controlStarted)
	assert.LessOrEqual(t, untouchedCounted, credit-1, "a crash counts at most the deliveries the process held (the window, the control aside)")
}

// faultStarted reads the meta.ids of the handler starts in the child's log.
func faultStarted(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) == 3 && parts[0] == "S" {
			out[parts[2]] = true
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// faultFailOnce takes one message off addr, gives it back as a failed
// delivery (modified, delivery-failed: the broker counts it) and returns its
// meta.id.
func faultFailOnce(t *testing.T, b *brokertest.Broker, addr string) string {
	t.Helper()
	conn := b.Dial(t)
	r := conn.NewReceiver(addr, &brokertest.ReceiverOptions{Credit: 1})
	msg := conn.Receive(r, brokertest.OpTimeout)
	body, ok := msg.Value.(string)
	require.True(t, ok, "a message on %s without a string value body: %T", addr, msg.Value)
	env, err := artemis.Decode([]byte(body))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.OpTimeout)
	defer cancel()
	require.NoError(t, r.ModifyMessage(ctx, msg, &amqp.ModifyMessageOptions{DeliveryFailed: true}))
	conn.CloseReceiver(r)
	return env.Meta.ID
}

// faultDeliveryCounts drains addr (n messages expected) and returns each
// meta.id's AMQP header delivery-count.
func faultDeliveryCounts(t *testing.T, b *brokertest.Broker, addr string, n int) map[string]uint32 {
	t.Helper()
	out := map[string]uint32{}
	faultReceiveAll(t, b, addr, func(env *artemis.Envelope, msg *amqp.Message) bool {
		var dc uint32
		if msg.Header != nil {
			dc = msg.Header.DeliveryCount
		}
		out[env.Meta.ID] = dc
		return len(out) < n
	})
	return out
}
