package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The environment variables `scripts/artemis ha-start` (and ha-env) print
// for a replication pair, plus the script that manages it.
const (
	EnvHAName          = "ARTEMIS_HA_NAME"
	EnvHAURLs          = "ARTEMIS_HA_URLS" // primary,backup
	EnvHAPrimaryURL    = "ARTEMIS_HA_PRIMARY_URL"
	EnvHABackupURL     = "ARTEMIS_HA_BACKUP_URL"
	EnvHAPrimaryCore   = "ARTEMIS_HA_PRIMARY_CORE_URL"
	EnvHABackupCore    = "ARTEMIS_HA_BACKUP_CORE_URL"
	EnvHAPrimaryDir    = "ARTEMIS_HA_PRIMARY_DIR"
	EnvHABackupDir     = "ARTEMIS_HA_BACKUP_DIR"
	EnvScript          = "ARTEMIS_SCRIPT" // path of scripts/artemis
	haScriptTimeout    = 3 * time.Minute  // one ha-kill / ha-restart, on a loaded machine
	haActivePollPeriod = 50 * time.Millisecond
)

// HAPair is a running Artemis replication pair (primary and backup) that
// `scripts/artemis ha-start` started, as the environment describes it. Its
// methods SIGKILL and restart the primary (with package artemisctl, else
// through the script).
type HAPair struct {
	Name    string
	Primary *Broker
	Backup  *Broker
	script  string
}

// HAFromEnv reads the pair's settings. ok is false when ARTEMIS_HA_URLS is
// not set.
func HAFromEnv() (p *HAPair, ok bool) {
	if os.Getenv(EnvHAURLs) == "" {
		return nil, false
	}
	node := func(urlVar, coreVar, dirVar string) *Broker {
		return &Broker{
			URL:         os.Getenv(urlVar),
			CoreURL:     os.Getenv(coreVar),
			Home:        os.Getenv(EnvHome),
			InstanceDir: os.Getenv(dirVar),
			User:        os.Getenv(EnvUser),
			Password:    os.Getenv(EnvPassword),
		}
	}
	return &HAPair{
		Name:    os.Getenv(EnvHAName),
		Primary: node(EnvHAPrimaryURL, EnvHAPrimaryCore, EnvHAPrimaryDir),
		Backup:  node(EnvHABackupURL, EnvHABackupCore, EnvHABackupDir),
		script:  scriptName(),
	}, true
}

// scriptName is ARTEMIS_SCRIPT, else scripts/artemis (relative to the
// package under test).
func scriptName() string {
	if s := os.Getenv(EnvScript); s != "" {
		return s
	}
	return "scripts/artemis"
}

// ScriptPath is the absolute path of scripts/artemis: ARTEMIS_SCRIPT, else
// scripts/artemis below the working directory.
func ScriptPath() (string, error) { return filepath.Abs(scriptName()) }

// RunScript runs script with args and the extra environment env (KEY=value
// entries added to the test's own), bounded by timeout, and returns its
// stdout and the run's error. It logs stderr, and the run's duration, when
// there is any or the run failed.
func RunScript(t testing.TB, script string, env []string, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, script, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if msg := strings.TrimSpace(stderr.String()); msg != "" || err != nil {
		t.Logf("scripts/artemis %s (%v): %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), msg)
	}
	return stdout.String(), err
}

// RequireHA returns the pair, or skips the test when ARTEMIS_HA_URLS is not
// set. The environment must name the pair completely.
func RequireHA(t testing.TB) *HAPair {
	t.Helper()
	p, ok := HAFromEnv()
	if !ok {
		t.Skip("HA test skipped: ARTEMIS_HA_URLS is not set; run scripts/test, or " +
			`eval "$(ARTEMIS_HA_NAME=mine scripts/artemis ha-start)" and export ARTEMIS_SCRIPT`)
	}
	if p.Name == "" || p.Primary.URL == "" || p.Backup.URL == "" {
		t.Fatalf("%s is set but %s, %s or %s is not: eval all of `scripts/artemis ha-env`",
			EnvHAURLs, EnvHAName, EnvHAPrimaryURL, EnvHABackupURL)
	}
	return p
}

// URLs returns the primary's and the backup's URL, in that order.
func (p *HAPair) URLs() []string { return []string{p.Primary.URL, p.Backup.URL} }

// KillPrimary SIGKILLs the primary and waits until the backup's AMQP
// acceptor takes connections. It returns the time from the kill to that.
func (p *HAPair) KillPrimary(t testing.TB) time.Duration {
	t.Helper()
	var killed time.Time
	if root := p.root(); root != "" {
		c, done := directCtl(t, root, "ha-kill primary", EnvHAName+"="+p.Name)
		at, err := c.Pair(p.Name).Kill("primary", true)
		done(err)
		if at.IsZero() {
			t.Fatal("ha-kill primary: the primary was not running")
		}
		killed = at
	} else {
		out := p.Run(t, "ha-kill", "primary", "--no-wait")
		killed = time.Now()
		if v, ok := strings.CutPrefix(strings.TrimSpace(out), "export ARTEMIS_HA_KILLED_AT_MS="); ok {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				killed = time.UnixMilli(ms)
			}
		} else {
			t.Fatalf("ha-kill primary printed %q, not the moment of the kill: was the primary running?", out)
		}
	}
	addr := hostPort(t, p.Backup.URL)
	deadline := killed.Add(haScriptTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return time.Since(killed)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup (%s) did not become active within %v of the primary's SIGKILL", addr, haScriptTimeout)
		}
		time.Sleep(haActivePollPeriod)
	}
}

// RestartPrimary starts the killed primary again. It returns once
// the primary is active again (it synchronised from the backup, which went
// back to being a backup: fail-back). It returns how long that took.
func (p *HAPair) RestartPrimary(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	if root := p.root(); root != "" {
		c, done := directCtl(t, root, "ha-restart primary", EnvHAName+"="+p.Name)
		done(c.Pair(p.Name).Restart("primary"))
	} else {
		p.Run(t, "ha-restart", "primary")
	}
	return time.Since(start)
}

// root is the repository whose scripts/artemis made the pair ("" when the
// environment does not name the primary's directory): the pair is then
// managed with package artemisctl directly, not through the script.
func (p *HAPair) root() string {
	return ctlRoot(p.Primary.InstanceDir, p.Name+"-primary")
}

// Status returns `scripts/artemis ha-status`: one line per node, "primary:
// active, ..." / "backup: backup, ..." / "...: stopped, ...".
func (p *HAPair) Status(t testing.TB) string {
	t.Helper()
	return p.Run(t, "ha-status")
}

// Run runs the script for this pair (ARTEMIS_HA_NAME set to its name) and
// returns its stdout, failing the test when the script fails; it logs
// stderr. ha-status exiting 3 (a node is stopped) is an answer, not a
// failure.
func (p *HAPair) Run(t testing.TB, args ...string) string {
	t.Helper()
	return runNamed(t, p.script, EnvHAName+"="+p.Name, haScriptTimeout, "ha-status", args...)
}

// runNamed runs script with env added (the variable that names the pair or
// the cluster) and returns its stdout, failing the test when the script
// fails; it logs stderr. The status command exiting 3 (a node is stopped)
// is an answer, not a failure.
func runNamed(t testing.TB, script, env string, timeout time.Duration, status string, args ...string) string {
	t.Helper()
	script, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	out, err := RunScript(t, script, []string{env}, timeout, args...)
	var exit *exec.ExitError
	stoppedNode := args[0] == status && errors.As(err, &exit) && exit.ExitCode() == 3
	if err != nil && !stoppedNode {
		t.Fatalf("scripts/artemis %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func hostPort(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Fatalf("not a broker URL: %s", redactURL(raw))
	}
	return u.Host
}

// redactURL drops the password from a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// The backup's log lines that date a fail-back: it sends its journal files
// to the restarted primary (AMQ221025, one line per file), then, while the
// two finish synchronising, it stops delivering and settling (accepts sent
// then are lost: the primary takes over without them) until it closes its
// connections and restarts as a backup (AMQ221039).
const (
	logSendingToReplica = "AMQ221025"
	logRestartAsBackup  = "AMQ221039"
	handBackLogWait     = 15 * time.Second
)

// HandBackStarted returns when the backup began handing back to a primary
// restarted at or after since: the stamp of its last AMQ221025 line before
// its AMQ221039 line. It waits up to 15 s for AMQ221039 and fails the test
// when the log has no such pair of lines.
func (p *HAPair) HandBackStarted(t testing.TB, since time.Time) time.Time {
	t.Helper()
	at, found := p.FindHandBack(t, since)
	if !found {
		t.Fatalf("the backup's log has no %s line (restarting as a backup) within %v of the primary's restart at %s (%s)",
			logRestartAsBackup, handBackLogWait, since.Truncate(time.Millisecond).Format(time.TimeOnly), p.Backup.LogPath())
	}
	return at
}

// FindHandBack is HandBackStarted without failing the test when the backup
// did not hand back within 15 s: found is false then. A log with
// AMQ221039 but no AMQ221025 before it still fails the test.
func (p *HAPair) FindHandBack(t testing.TB, since time.Time) (at time.Time, found bool) {
	t.Helper()
	since = since.Truncate(time.Millisecond) // the log's resolution
	deadline := time.Now().Add(handBackLogWait)
	for {
		lines, err := p.Backup.Log(since)
		if err != nil {
			t.Fatal(err)
		}
		at, found, err := handBackStart(lines)
		if err != nil {
			t.Fatalf("%v (%s)", err, p.Backup.LogPath())
		}
		if found || time.Now().After(deadline) {
			return at, found
		}
		time.Sleep(haActivePollPeriod)
	}
}

// handBackStart finds, in lines, the last AMQ221025 line before the first
// AMQ221039 line. found is false while there is no AMQ221039 line yet; an
// AMQ221039 without an AMQ221025 before it is an error.
func handBackStart(lines []LogLine) (at time.Time, found bool, err error) {
	var sending *LogLine
	for i := range lines {
		switch {
		case strings.Contains(lines[i].Text, logSendingToReplica):
			sending = &lines[i]
		case strings.Contains(lines[i].Text, logRestartAsBackup):
			if sending == nil {
				return time.Time{}, false, fmt.Errorf("the backup's log has %s (restarting as a backup) at %s without an %s line (sending its journal to the primary) before it",
					logRestartAsBackup, lines[i].At.Format(time.TimeOnly), logSendingToReplica)
			}
			return sending.At, true, nil
		}
	}
	return time.Time{}, false, nil
}
