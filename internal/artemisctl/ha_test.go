package artemisctl

import (
	"strings"
	"testing"
	"time"
)

func TestExportLinesPair(t *testing.T) {
	c, out, _ := testCtl(t, "ARTEMIS_HA_NAME=bgoha")
	p := writeState(t, c, "bgoha-primary", "AMQP_PORT=1001", "CORE_PORT=1002", "USER=babel", "PASSWORD=babel", "HA_ROLE=primary", "HA_PEER_CORE=1004")
	b := writeState(t, c, "bgoha-backup", "AMQP_PORT=1003", "CORE_PORT=1004", "USER=babel", "PASSWORD=babel", "HA_ROLE=backup", "HA_PEER_CORE=1002")
	if code := ExitCode(c.run([]string{"ha-env"}, nil, false)); code != 0 {
		t.Fatalf("ha-env exit %d", code)
	}
	want := "export ARTEMIS_HA_NAME=bgoha\n" +
		"export ARTEMIS_HA_URLS=amqp://babel:babel@127.0.0.1:1001,amqp://babel:babel@127.0.0.1:1003\n" +
		"export ARTEMIS_HA_PRIMARY_URL=amqp://babel:babel@127.0.0.1:1001\n" +
		"export ARTEMIS_HA_PRIMARY_CORE_URL=tcp://127.0.0.1:1002\n" +
		"export ARTEMIS_HA_PRIMARY_DIR=" + p.Dir + "\n" +
		"export ARTEMIS_HA_PRIMARY_PID=''\n" +
		"export ARTEMIS_USER=babel\n" +
		"export ARTEMIS_PASSWORD=babel\n" +
		"export ARTEMIS_HA_BACKUP_URL=amqp://babel:babel@127.0.0.1:1003\n" +
		"export ARTEMIS_HA_BACKUP_CORE_URL=tcp://127.0.0.1:1004\n" +
		"export ARTEMIS_HA_BACKUP_DIR=" + b.Dir + "\n" +
		"export ARTEMIS_HA_BACKUP_PID=''\n" +
		"export ARTEMIS_HOME=" + c.Dist + "\n"
	if out.String() != want {
		t.Errorf("ha-env:\n%s\nwant:\n%s", out, want)
	}
}

// The backup's console around a fail-back (Artemis 2.40 with the file
// lock manager): its sync of the restarted primary, its stop, its restart
// as a backup, and its sync from the primary.
const failBackConsole = `2026-12-03 09:35:31,256 INFO  [org.apache.activemq.artemis.core.server] AMQ221024: Backup server ActiveMQServerImpl::name=bgoha-backup is synchronized with primary server, nodeID=da750f66.
2026-12-03 09:35:31,301 INFO  [org.apache.activemq.artemis.core.server] AMQ221031: backup announced
2026-12-03 09:35:46,883 INFO  [org.apache.activemq.artemis.core.server] AMQ221025: Replication: sending NIOSequentialFile /x/activemq-data-3.amq (size=2097152) to replica.
  at a stack trace line AMQ221024: Backup server x is synchronized with primary server
2026-12-03 09:35:47,932 INFO  [org.apache.activemq.artemis.core.server] AMQ221039: Restarting as replicating backup server after primary restart
2026-12-03 09:35:47,935 INFO  [org.apache.activemq.artemis.core.server.impl.ReplicationBackupActivation] Not a candidate for NodeID = da750f66 activation, local activation sequence 2 does not match coordinated activation sequence 3
2026-12-03 09:35:49,157 INFO  [org.apache.activemq.artemis.core.server] AMQ221024: Backup server ActiveMQServerImpl::name=bgoha-backup is synchronized with primary server, nodeID=da750f66.
2026-12-03 09:35:49,168 INFO  [org.apache.activemq.artemis.core.server] AMQ221031: backup announced
`

func stamp(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.ParseInLocation(logStamp, s, time.Local)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func TestLogLineSinceSkipsEarlierLinesAndUnstampedOnes(t *testing.T) {
	i, _ := readyInstance(t, failBackConsole)
	at, ok := logLineSince(i, reSynchronized, stamp(t, "2026-12-03 09:35:40,000"))
	if !ok || !at.Equal(stamp(t, "2026-12-03 09:35:49,157")) {
		t.Errorf("AMQ221024 after the restart: %v %v, want 09:35:49,157", at, ok)
	}
	if at, ok := logLineSince(i, reSynchronized, stamp(t, "2026-12-03 09:35:31,256")); !ok || !at.Equal(stamp(t, "2026-12-03 09:35:31,256")) {
		t.Errorf("a line stamped at since counts: %v %v", at, ok)
	}
	if _, ok := logLineSince(i, reSynchronized, stamp(t, "2026-12-03 09:35:49,158")); ok {
		t.Error("a line before since was found")
	}
	if at, ok := logLineSince(i, reNotCandidate, time.Time{}); !ok || !at.Equal(stamp(t, "2026-12-03 09:35:47,935")) {
		t.Errorf("not a candidate: %v %v", at, ok)
	}
}

func TestWaitWholeNeedsASyncAndAnAnnouncementAfterTheRestart(t *testing.T) {
	i, _ := readyInstance(t, failBackConsole)
	p := &Pair{c: i.c, Name: "bgoha"}
	if err := p.waitWhole(i, stamp(t, "2026-12-03 09:35:40,000")); err != nil {
		t.Fatalf("the sync and the announcement after the restart: %v", err)
	}
	// No broker runs for this instance: without a sync after since, the
	// wait ends at once, saying the backup stopped.
	err := p.waitWhole(i, stamp(t, "2026-12-03 09:35:49,160"))
	if err == nil || !strings.Contains(err.Error(), "stopped before it synchronized") {
		t.Fatalf("no sync after since: %v, want an error naming the missing sync", err)
	}
}
