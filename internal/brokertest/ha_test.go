package brokertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

// TestHAPairFailsOverAndFailsBack proves the replication pair of
// `scripts/artemis ha-start`: durable messages sent to the primary are on
// the backup after the primary is SIGKILLed, the backup takes new ones,
// and after the primary's restart (fail-back) the primary has every message
// that was not consumed, once, and the backup no longer serves AMQP.
func TestHAPairFailsOverAndFailsBack(t *testing.T) {
	pair := RequireHA(t)
	queue := Queue(t)
	const before, consumedOnBackup, onBackup = 20, 5, 5

	primary := pair.Primary.Dial(t)
	for i := range before {
		primary.Send(queue, durable(fmt.Sprintf("before-%02d", i)))
	}

	failover := pair.KillPrimary(t)
	t.Logf("backup active %v after the primary's SIGKILL", failover.Round(time.Millisecond))
	if st := pair.Status(t); !strings.Contains(st, "primary: stopped") || !strings.Contains(st, "backup: active") {
		t.Fatalf("after the kill: %s", st)
	}

	backup := pair.Backup.Dial(t)
	r := backup.NewReceiver(queue, &ReceiverOptions{Credit: 1})
	consumed := map[string]bool{}
	for range consumedOnBackup {
		msg := backup.Receive(r, OpTimeout)
		if msg == nil {
			t.Fatalf("the backup has no message on %s after the failover (consumed %d)", queue, len(consumed))
		}
		backup.Accept(r, msg)
		consumed[body(t, msg)] = true
	}
	backup.CloseReceiver(r)
	for i := range onBackup {
		backup.Send(queue, durable(fmt.Sprintf("after-%02d", i)))
	}
	for i := range consumedOnBackup {
		if name := fmt.Sprintf("before-%02d", i); !consumed[name] {
			t.Fatalf("the backup handed out %v first, not before-00..04 in order", consumed)
		}
	}

	restart := time.Now()
	failback := pair.RestartPrimary(t)
	t.Logf("primary active again %v after its restart (fail-back)", failback.Round(time.Millisecond))
	// The backup's log dates the hand-back (the fault tests' bound uses it).
	handBack := pair.HandBackStarted(t, restart)
	if handBack.Before(restart.Truncate(time.Millisecond)) || handBack.After(time.Now()) {
		t.Fatalf("the hand-back at %s is not between the restart at %s and now", handBack.Format(time.StampMilli), restart.Format(time.StampMilli))
	}
	t.Logf("the backup began handing back %v after the restart", handBack.Sub(restart).Round(time.Millisecond))
	// RestartPrimary returns once the pair is whole again: the backup
	// restarted itself as a backup (its AMQP acceptor closed) and is
	// synchronized with the primary.
	if st := pair.Status(t); !strings.Contains(st, "primary: active") || !strings.Contains(st, "backup: backup") {
		t.Fatalf("after fail-back: %s", st)
	}
	synced := false
	lines, err := pair.Backup.Log(handBack)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		synced = synced || strings.Contains(l.Text, "AMQ221024")
	}
	if !synced {
		t.Fatalf("RestartPrimary returned before the backup synchronized with the primary again (no AMQ221024 after %s in %s)",
			handBack.Format(time.StampMilli), pair.Backup.LogPath())
	}

	again := pair.Primary.Dial(t)
	got := again.Drain(queue, "")
	seen := map[string]int{}
	for _, m := range got {
		seen[body(t, m)]++
	}
	var want []string
	for i := consumedOnBackup; i < before; i++ {
		want = append(want, fmt.Sprintf("before-%02d", i))
	}
	for i := range onBackup {
		want = append(want, fmt.Sprintf("after-%02d", i))
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("%s on the primary after fail-back: %d times, want once", w, seen[w])
		}
	}
	if len(got) != len(want) {
		t.Errorf("the primary holds %d messages after fail-back, want %d (consumed ones must stay consumed): %v",
			len(got), len(want), seen)
	}
	t.Logf("HA FIGURES: sent %d to the primary, consumed %d and sent %d on the backup, %d left after fail-back (want %d); failover %v, fail-back %v",
		before, consumedOnBackup, onBackup, len(got), len(want), failover.Round(time.Millisecond), failback.Round(time.Millisecond))
}

func durable(text string) *amqp.Message {
	m := amqp.NewMessage([]byte(text))
	m.Header = &amqp.MessageHeader{Durable: true}
	return m
}

func body(t *testing.T, m *amqp.Message) string {
	t.Helper()
	data := m.GetData()
	if data == nil {
		t.Fatalf("a message without a data body: %+v", m)
	}
	return string(data)
}
