package brokertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A backup's log as Artemis 2.40 writes it (trimmed): its start as a
// replicating backup, the failover (it serves), the fail-back (it stops its
// server and restarts as a replicating backup).
const (
	backupStarted = `2026-12-03 18:05:06,445 INFO  [org.apache.activemq.artemis.integration.bootstrap] AMQ101000: Starting ActiveMQ Artemis Server version 2.40.0
2026-12-03 18:05:06,519 INFO  [org.apache.activemq.artemis.core.server] AMQ221000: Backup message broker is starting with configuration Broker Configuration (clustered=true,journalDirectory=data/journal)
2026-12-03 18:05:07,300 INFO  [org.apache.activemq.artemis.core.server.impl.ReplicationBackupActivation] Apache ActiveMQ Artemis Backup Server version 2.40.0 [ActiveMQServerImpl::name=b] started, awaiting connection to a primary
2026-12-03 18:05:08,220 INFO  [org.apache.activemq.artemis.core.server] AMQ221024: Backup server ActiveMQServerImpl::name=b is synchronized with primary server, nodeID=0ce6255c.
2026-12-03 18:05:08,241 INFO  [org.apache.activemq.artemis.core.server] AMQ221031: backup announced
`
	backupServes = `2026-12-03 18:08:38,191 INFO  [org.apache.activemq.artemis.core.server.impl.ReplicationBackupActivation] Assuming active role for NodeID = 0ce6255c, local activation sequence 1 matches current coordinated activation sequence 1
2026-12-03 18:08:38,208 INFO  [org.apache.activemq.artemis.core.server] AMQ221037: ActiveMQServerImpl::name=b to become 'active'
2026-12-03 18:08:38,727 INFO  [org.apache.activemq.artemis.core.server] AMQ221007: Server is now active
2026-12-03 18:08:38,738 INFO  [org.apache.activemq.artemis.core.server] AMQ221020: Started EPOLL Acceptor at 127.0.0.1:39437 for protocols [AMQP]
`
	backupStops = `2026-12-03 18:09:23,100 INFO  [org.apache.activemq.artemis.core.server] AMQ221025: Replication: sending NIOSequentialFile /x/data/journal/activemq-data-12.amq (size=2097152) to replica.
2026-12-03 18:09:23,500 WARN  [org.apache.activemq.artemis.core.server] AMQ222154: Error checking DLQ
org.apache.activemq.artemis.api.core.ActiveMQShutdownException: Journal must be in state=LOADED, was [STOPPED]
	at org.apache.activemq.artemis.core.journal.impl.JournalImpl.checkJournalIsLoaded(JournalImpl.java:1300)
2026-12-03 18:09:23,683 INFO  [org.apache.activemq.artemis.core.server] AMQ221002: Apache ActiveMQ Artemis Message Broker version 2.40.0 [0ce6255c] stopped, uptime 4 minutes
`
	backupHandsBack = `2026-12-03 18:09:24,084 INFO  [org.apache.activemq.artemis.core.server.impl.ReplicationPrimaryActivation] Detected a new activation sequence with NodeID = 0ce6255c: and sequence: 3
2026-12-03 18:09:24,088 INFO  [org.apache.activemq.artemis.core.server] AMQ221039: Restarting as replicating backup server after primary restart
2026-12-03 18:09:24,090 INFO  [org.apache.activemq.artemis.core.server] AMQ221000: Backup message broker is starting with configuration Broker Configuration (clustered=true)
2026-12-03 18:09:27,729 INFO  [org.apache.activemq.artemis.core.server] AMQ221024: Backup server ActiveMQServerImpl::name=b is synchronized with primary server, nodeID=0ce6255c.
2026-12-03 18:09:27,773 INFO  [org.apache.activemq.artemis.core.server] AMQ221031: backup announced
`
)

func TestLogCode(t *testing.T) {
	for line, want := range map[string]string{
		"2026-12-03 18:05:08,241 INFO  [org.apache.activemq.artemis.core.server] AMQ221031: backup announced":      "AMQ221031",
		"2026-12-03 18:08:38,191 INFO  [x.ReplicationBackupActivation] Assuming active role for NodeID = 0ce6255c": "",
		"2026-12-03 18:08:38,191 WARN  [x] could not start: AMQ221007: quoted, not the line's own code":            "",
		"2026-12-03 18:08:38,191 INFO  no logger, AMQ221002: stopped":                                              "",
	} {
		assert.Equal(t, want, logCode(line), line)
	}
}

func TestBackupReplicating(t *testing.T) {
	for _, tc := range []struct {
		name, log string
		ok        bool
		last      string // the code of the last lifecycle line
	}{
		{"started and announced", backupStarted, true, logBackupAnnounced},
		{"synchronized, not announced yet", strings.TrimSuffix(backupStarted, "2026-12-03 18:05:08,241 INFO  [org.apache.activemq.artemis.core.server] AMQ221031: backup announced\n"), false, logSynchronized},
		{"serving after a failover", backupStarted + backupServes, false, logServerActive},
		// The miss: its server stopped for the fail-back, and nothing after.
		{"stopped, never restarted as a backup", backupStarted + backupServes + backupStops, false, logServerStopped},
		{"restarting as a backup", backupStarted + backupServes + backupStops + strings.Join(strings.SplitAfter(backupHandsBack, "\n")[:3], ""), false, logServerStarting},
		{"handed back and replicating again", backupStarted + backupServes + backupStops + backupHandsBack, true, logBackupAnnounced},
		{"announced without a synchronization since its start", "2026-12-03 18:05:06,519 INFO  [s] AMQ221000: Backup message broker is starting\n2026-12-03 18:05:08,241 INFO  [s] AMQ221031: backup announced\n", false, logBackupAnnounced},
		{"no lifecycle line", "2026-12-03 18:05:06,445 INFO  [s] AMQ101000: Starting ActiveMQ Artemis Server version 2.40.0\n", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := parseLog(strings.NewReader(tc.log), time.Time{}, time.UTC)
			require.NoError(t, err)
			ok, last := backupReplicating(lines)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.last, logCode(last.Text))
		})
	}
}

// fakePair is a pair whose script is a shell script that answers ha-status
// from a file and records its other calls; its backup's console log is a
// file the test writes.
type fakePair struct {
	*HAPair
	dir string
}

func newFakePair(t *testing.T, status, console string) *fakePair {
	t.Helper()
	dir := t.TempDir()
	bak := filepath.Join(dir, "fake-backup")
	require.NoError(t, os.MkdirAll(filepath.Join(bak, "log"), 0o755))
	// ha-restart backup: the backup starts again (a fresh console), is
	// synchronized and announced, and ha-status shows it running.
	script := `#!/bin/sh
d=$(dirname "$0")
echo "$ARTEMIS_HA_NAME $* timeout=${ARTEMIS_START_TIMEOUT:-}" >>"$d/calls"
case "$1" in
ha-status) cat "$d/status"; grep -q 'stopped' "$d/status" && exit 3; exit 0 ;;
ha-kill) sed -i 's/^backup: [a-z]*,/backup: stopped,/' "$d/status" ;;
ha-restart)
  cp "$d/restarted.log" "$d/fake-backup/log/console.log"
  sed -i 's/^backup: [a-z]*,/backup: backup,/' "$d/status" ;;
esac
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "artemis"), []byte(script), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "restarted.log"), []byte(backupStarted), 0o644))
	p := &fakePair{HAPair: &HAPair{Name: "fake", Primary: &Broker{}, Backup: &Broker{InstanceDir: bak}, script: filepath.Join(dir, "artemis")}, dir: dir}
	p.set(t, status, console)
	return p
}

func (p *fakePair) set(t *testing.T, status, console string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(p.dir, "status"), []byte(status), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(p.Backup.InstanceDir, "log", "console.log"), []byte(console), 0o644))
}

func (p *fakePair) calls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "calls"))
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.Contains(l, "ha-status") {
			out = append(out, l)
		}
	}
	return out
}

func fakeStatus(primary, backup string) string {
	return "primary: " + primary + ", instance fake-primary, pid 10, AMQP 127.0.0.1:1, CORE 127.0.0.1:2\n" +
		"backup: " + backup + ", instance fake-backup, pid 11, AMQP 127.0.0.1:3, CORE 127.0.0.1:4\n"
}

func TestCheckBackup(t *testing.T) {
	p := newFakePair(t, fakeStatus("active", "backup"), backupStarted+backupServes+backupStops+backupHandsBack)
	c := p.CheckBackup(t)
	assert.True(t, c.Whole(), "%s", c)
	assert.Contains(t, c.Last, "AMQ221031")
	assert.Equal(t, filepath.Join(p.Backup.InstanceDir, "log", "console.log"), c.Log)

	// The miss: the JVM runs on, its server stopped.
	p.set(t, fakeStatus("active", "backup"), backupStarted+backupServes+backupStops)
	c = p.CheckBackup(t)
	assert.False(t, c.Whole())
	assert.Contains(t, c.String(), "primary active, backup backup, replicating false; the backup's last lifecycle line: 2026-12-03 18:09:23,683 INFO  [org.apache.activemq.artemis.core.server] AMQ221002")

	// A log that says replicating, but the JVM is gone.
	p.set(t, fakeStatus("active", "stopped"), backupStarted)
	c = p.CheckBackup(t)
	assert.False(t, c.Replicating, "a stopped backup does not replicate, whatever its log says")

	// A backup serving (its AMQP acceptor up) is not a backup.
	p.set(t, fakeStatus("stopped", "active"), backupStarted)
	assert.False(t, p.CheckBackup(t).Replicating)

	// No console log (a pair not started by scripts/artemis): artemis.log.
	p.set(t, fakeStatus("active", "backup"), "")
	require.NoError(t, os.Remove(filepath.Join(p.Backup.InstanceDir, "log", "console.log")))
	require.NoError(t, os.WriteFile(p.Backup.LogPath(), []byte(backupStarted+backupServes), 0o644))
	c = p.CheckBackup(t)
	assert.False(t, c.Whole(), "artemis.log says the backup serves: %s", c)
	assert.Contains(t, c.Last, "AMQ221007")
	assert.Equal(t, p.Backup.LogPath(), c.Log)
}

func TestWaitBackupReturnsAtOnceWhenItCannotComeBack(t *testing.T) {
	p := newFakePair(t, fakeStatus("active", "stopped"), backupStarted+backupServes+backupStops)
	start := time.Now()
	c := p.WaitBackup(t, time.Minute)
	assert.Less(t, time.Since(start), 30*time.Second, "a stopped backup does not come back by itself: no wait")
	assert.Equal(t, "stopped", c.Backup)
}

func TestWaitBackupBounded(t *testing.T) {
	p := newFakePair(t, fakeStatus("active", "backup"), backupStarted+backupServes+backupStops)
	start := time.Now()
	c := p.WaitBackup(t, time.Second)
	assert.False(t, c.Whole())
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "it waits for the backup to come back")
	assert.Less(t, time.Since(start), 30*time.Second, "but not past its timeout")
}

func TestRestoreBackup(t *testing.T) {
	t.Run("stopped: restarted", func(t *testing.T) {
		p := newFakePair(t, fakeStatus("active", "stopped"), backupStarted+backupServes+backupStops)
		c, err := p.RestoreBackup(t, time.Minute)
		require.NoError(t, err)
		assert.True(t, c.Whole(), "%s", c)
		calls := p.calls(t)
		require.Len(t, calls, 1, "%v", calls)
		assert.Regexp(t, `^fake ha-restart backup timeout=(59|60)$`, calls[0], "the start timeout is what is left of the bound")
	})
	t.Run("running a stopped server: killed, restarted", func(t *testing.T) {
		p := newFakePair(t, fakeStatus("active", "backup"), backupStarted+backupServes+backupStops)
		c, err := p.RestoreBackup(t, time.Minute)
		require.NoError(t, err)
		assert.True(t, c.Whole(), "%s", c)
		calls := p.calls(t)
		require.Len(t, calls, 2, "%v", calls)
		assert.True(t, strings.HasPrefix(calls[0], "fake ha-kill backup"), calls[0])
		assert.True(t, strings.HasPrefix(calls[1], "fake ha-restart backup"), calls[1])
	})
	t.Run("whole: nothing done", func(t *testing.T) {
		p := newFakePair(t, fakeStatus("active", "backup"), backupStarted)
		_, err := p.RestoreBackup(t, time.Minute)
		require.NoError(t, err)
		_, err = os.Stat(filepath.Join(p.dir, "calls"))
		require.NoError(t, err)
		assert.Empty(t, p.calls(t))
	})
	for _, tc := range []struct{ name, status, want string }{
		{"primary stopped: refused", fakeStatus("stopped", "stopped"), "the primary is not active"},
		{"backup serving: refused", fakeStatus("active", "active"), "the backup serves"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakePair(t, tc.status, backupStarted+backupServes)
			_, err := p.RestoreBackup(t, time.Minute)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, p.calls(t), "nothing killed or restarted")
		})
	}
	t.Run("restarted but never announced: bounded", func(t *testing.T) {
		p := newFakePair(t, fakeStatus("active", "stopped"), backupStarted+backupServes+backupStops)
		synced := strings.TrimSuffix(backupStarted, "2026-12-03 18:05:08,241 INFO  [org.apache.activemq.artemis.core.server] AMQ221031: backup announced\n")
		require.NoError(t, os.WriteFile(filepath.Join(p.dir, "restarted.log"), []byte(synced), 0o644))
		start := time.Now()
		c, err := p.RestoreBackup(t, 2*time.Second)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not replicating within 2s")
		assert.False(t, c.Whole())
		assert.Less(t, time.Since(start), 30*time.Second)
	})
}
