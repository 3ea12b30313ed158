package faults_test

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

// haStall is how long the backup's JVM stays stopped once the restarted
// primary's JVM is up: longer than anything the primary may wait for its
// backup before deciding how to start (a quorum-voting primary waits 5 s
// for the cluster topology, then activates on its own journal), and than
// the Client's idle timeout (10 s), so the Client gives the stalled
// backup up and dials again while the primary decides.
const haStall = 20 * time.Second

var reStatusPid = regexp.MustCompile(`(?m)^backup: active, instance \S+, pid ([0-9]+),`)

// haBackupPid is the pid of the pair's active backup, from ha-status.
func haBackupPid(t *testing.T, h *brokertest.HAPair) int {
	t.Helper()
	st := h.Status(t)
	m := reStatusPid.FindStringSubmatch(st)
	require.NotNil(t, m, "the backup is active after the failover: %s", st)
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return pid
}

// haWaitLogLine waits (up to 3 minutes) until b's log has a line
// containing text at or after since, and returns its stamp.
func haWaitLogLine(t *testing.T, b *brokertest.Broker, since time.Time, text string) time.Time {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		lines, err := b.Log(since.Truncate(time.Millisecond))
		require.NoError(t, err)
		for _, l := range lines {
			if strings.Contains(l.Text, text) {
				return l.At
			}
		}
		require.True(t, time.Now().Before(deadline), "no %q line in %s within 3 minutes", text, b.LogPath())
		time.Sleep(100 * time.Millisecond) // polls a log file; bounded by the deadline
	}
}

// TestFaultHAFailbackWhileBackupStalls: the moment a slow, overloaded
// machine makes of a fail-back, made on purpose. After a failover the
// backup serves; its JVM is stopped (SIGSTOP: no process time at all, its
// sockets open and silent) as the primary restarts, and let go 20 s after
// the primary's JVM is up. The primary must not serve meanwhile: it cannot
// reach the backup, and its own journal lacks all the backup accepted.
// Once the backup runs again, the pair fails back as usual. The phase
// fails on any acknowledged message lost, and says whether the broker
// pair or the library lost it.
func TestFaultHAFailbackWhileBackupStalls(t *testing.T) {
	h := requireFaultHA(t)
	status := h.Status(t)
	require.Contains(t, status, "primary: active", "the pair starts with its primary active: %s", status)
	h.Run(t, "ha-kill", "primary")
	killed := true
	stoppedPid := 0
	t.Cleanup(func() {
		if stoppedPid != 0 {
			_ = syscall.Kill(stoppedPid, syscall.SIGCONT)
		}
		if killed { // never leave the pair on its backup
			h.Run(t, "ha-restart", "primary")
		}
	})
	pid := haBackupPid(t, h)

	faultHAPhase(t, h, "HA fail-back with the backup stalled (SIGSTOP)", "primary", func(tl *haTimeline) (string, time.Time) {
		stalled := time.Now()
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP), "SIGSTOP the backup (pid %d)", pid)
		stoppedPid = pid
		tl.fault(stalled, "the backup's stall")
		script, err := brokertest.ScriptPath()
		require.NoError(t, err)
		restarted := make(chan error, 1)
		go func() {
			_, err := brokertest.RunScript(t, script, []string{brokertest.EnvHAName + "=" + h.Name, "ARTEMIS_START_TIMEOUT=240"}, 5*time.Minute, "ha-restart", "primary")
			restarted <- err
		}()
		// AMQ221000: the primary's JVM is up and starting the broker.
		up := haWaitLogLine(t, h.Primary, stalled, "AMQ221000")
		select {
		case err := <-restarted:
			t.Errorf("ha-restart returned while the backup was stalled (%v): the primary serves on its own journal", err)
			restarted <- err
		case <-time.After(time.Until(up.Add(haStall))):
		}
		require.NoError(t, syscall.Kill(pid, syscall.SIGCONT), "SIGCONT the backup (pid %d)", pid)
		stoppedPid = 0
		resumed := time.Now()
		tl.fault(resumed, "the backup's resume")
		select {
		case err := <-restarted:
			require.NoError(t, err, "ha-restart primary")
		case <-time.After(5 * time.Minute):
			t.Fatal("ha-restart primary did not return within 5 minutes of the backup's resume")
		}
		killed = false
		at, found := h.FindHandBack(t, resumed)
		if !found {
			t.Errorf("the backup did not hand back to the restarted primary: its log has no AMQ221039 line after its resume (%s)", h.Backup.LogPath())
			return "backup stalled 20 s past the primary's restart, the backup did NOT hand back", stalled
		}
		tl.fault(at, "the backup's hand-back")
		return "backup stalled 20 s past the primary's restart, then handed back", stalled
	})
}
