package brokertest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Whether the pair still has a live replicating backup. After a fail-back
// the backup stops its server (AMQ221002) and restarts itself within the
// same JVM as a replicating backup (AMQ221039, then AMQ221000, AMQ221024,
// AMQ221031). Artemis can miss that restart: the backup stays stopped (its
// JVM gone, or running a stopped server), the primary serves alone, and a
// later failover has nowhere to go. The fault tests check the backup
// before each HA test and restore it after one.

// The message codes (Artemis 2.40) that mark a node's lifecycle in its
// log, besides logRestartAsBackup (AMQ221039).
const (
	logServerStarting  = "AMQ221000" // "<Backup|Primary> message broker is starting with configuration ..."
	logServerActive    = "AMQ221007" // "Server is now active": it serves clients
	logServerStopped   = "AMQ221002" // "... Message Broker version ... stopped, uptime ..."
	logSynchronized    = "AMQ221024" // "Backup server ... is synchronized with primary server"
	logBackupAnnounced = "AMQ221031" // "backup announced"
	backupPollPeriod   = 500 * time.Millisecond
)

// logCode is the message code that opens a log line's message
// ("AMQ221024" of "... INFO  [logger] AMQ221024: Backup server ..."), ""
// when it has none. A code quoted later in a message does not count.
func logCode(text string) string {
	_, msg, ok := strings.Cut(text, "] ")
	if !ok {
		return ""
	}
	code, _, ok := strings.Cut(msg, ":")
	if !ok || !strings.HasPrefix(code, "AMQ") || strings.ContainsAny(code, " \t") {
		return ""
	}
	return code
}

// backupReplicating reads a node's log lines (oldest first): ok when,
// after its last start, stop, activation or restart as a backup, it was
// synchronized with a primary (AMQ221024) and then announced (AMQ221031).
// last is the last lifecycle line (zero when there is none).
func backupReplicating(lines []LogLine) (ok bool, last LogLine) {
	synced := false
	for _, l := range lines {
		switch logCode(l.Text) {
		case logServerStarting, logServerActive, logServerStopped, logRestartAsBackup:
			synced, ok, last = false, false, l
		case logSynchronized:
			synced, ok, last = true, false, l
		case logBackupAnnounced:
			ok, last = synced, l
		}
	}
	return ok, last
}

// BackupCheck is what the pair's nodes are doing, from `scripts/artemis
// ha-status` and the backup's log.
type BackupCheck struct {
	// Replicating: the backup runs without an AMQP acceptor ("backup:
	// backup") and its log says it synchronized with the primary and was
	// announced since its last start, stop or activation.
	Replicating bool
	Primary     string // ha-status's word for the primary: active, backup or stopped
	Backup      string // the same for the backup
	Last        string // the backup's last lifecycle log line ("" when none)
	Log         string // the log file read
}

// Whole is true when the primary serves and the backup replicates it.
func (c BackupCheck) Whole() bool { return c.Primary == "active" && c.Replicating }

// String says what the check saw.
func (c BackupCheck) String() string {
	last := c.Last
	if last == "" {
		last = "none"
	}
	return fmt.Sprintf("primary %s, backup %s, replicating %t; the backup's last lifecycle line: %s (%s)",
		c.Primary, c.Backup, c.Replicating, last, c.Log)
}

var reStatusNode = regexp.MustCompile(`(?m)^(primary|backup): (active|backup|stopped),`)

// CheckBackup reads ha-status and the backup's log once.
func (p *HAPair) CheckBackup(t testing.TB) BackupCheck {
	t.Helper()
	var c BackupCheck
	for _, m := range reStatusNode.FindAllStringSubmatch(p.Status(t), -1) {
		if m[1] == "primary" {
			c.Primary = m[2]
		} else {
			c.Backup = m[2]
		}
	}
	lines, path, err := p.Backup.runLog()
	c.Log = path
	if err != nil {
		c.Last = err.Error()
		return c
	}
	ok, last := backupReplicating(lines)
	if !last.At.IsZero() {
		c.Last = shorten(last.Text, 200)
	}
	c.Replicating = ok && c.Backup == "backup"
	return c
}

// runLog is the lines of the node's current run: its console log (the
// JVM's output, which scripts/artemis starts afresh with each start and
// which is never rolled over), else its artemis.log (rolled at midnight).
func (b *Broker) runLog() ([]LogLine, string, error) {
	if b.InstanceDir == "" {
		return nil, "", fmt.Errorf("brokertest: no instance directory for the broker at %s: its log cannot be read", redactURL(b.URL))
	}
	path := filepath.Join(b.InstanceDir, "log", "console.log")
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		lines, err := b.Log(time.Time{})
		return lines, b.LogPath(), err
	}
	if err != nil {
		return nil, path, fmt.Errorf("brokertest: the broker's console log: %w", err)
	}
	defer func() { _ = f.Close() }()
	lines, err := parseLog(f, time.Time{}, time.Local)
	return lines, path, err
}

// shorten cuts s to at most n bytes, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// WaitBackup checks the pair until it is whole or timeout has passed; it
// returns at once when the backup is stopped (it does not come back by
// itself) or the primary is not active. It returns the last check.
func (p *HAPair) WaitBackup(t testing.TB, timeout time.Duration) BackupCheck {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c := p.CheckBackup(t)
		if c.Whole() || c.Backup == "stopped" || c.Primary != "active" || !time.Now().Before(deadline) {
			return c
		}
		time.Sleep(backupPollPeriod) // polls a status and a log file; bounded by the deadline
	}
}

// RestoreBackup starts the backup again as a replicating backup of the
// active primary: it SIGKILLs the backup's JVM when one still runs (a
// stopped server in it never restarts by itself), runs `scripts/artemis
// ha-restart backup` (the backup drops its journal and is synchronized
// from the primary) and waits until the pair is whole. It refuses when the
// primary is not active or the backup serves (either would lose the
// messages of the node serving). Bounded by timeout in all; it returns the
// last check.
func (p *HAPair) RestoreBackup(t testing.TB, timeout time.Duration) (BackupCheck, error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	c := p.CheckBackup(t)
	switch {
	case c.Whole():
		return c, nil
	case c.Primary != "active":
		return c, errors.New("the primary is not active: the backup is left as it is")
	case c.Backup == "active":
		return c, errors.New("the backup serves (both nodes active): it is left as it is")
	}
	script, err := filepath.Abs(p.script)
	if err != nil {
		return c, err
	}
	env := []string{EnvHAName + "=" + p.Name}
	if c.Backup != "stopped" {
		if _, err := RunScript(t, script, env, time.Until(deadline), "ha-kill", "backup"); err != nil {
			return c, fmt.Errorf("ha-kill backup: %w", err)
		}
	}
	left := time.Until(deadline)
	if left < time.Second {
		return c, fmt.Errorf("no time left within %v to restart the backup", timeout)
	}
	// ha-restart waits for the backup's AMQ221024 up to the start timeout.
	env = append(env, "ARTEMIS_START_TIMEOUT="+strconv.Itoa(int(left/time.Second)))
	if _, err := RunScript(t, script, env, left, "ha-restart", "backup"); err != nil {
		return p.CheckBackup(t), fmt.Errorf("ha-restart backup: %w", err)
	}
	c = p.WaitBackup(t, time.Until(deadline))
	if !c.Whole() {
		return c, fmt.Errorf("the backup was restarted but is not replicating within %v", timeout)
	}
	return c, nil
}
