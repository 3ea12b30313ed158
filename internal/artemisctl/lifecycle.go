package artemisctl

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Starting, stopping and killing a broker.

// logTail copies the last 40 lines of the broker's console log (else its
// artemis.log) to stderr.
func (i *Instance) logTail() {
	f := i.console
	if st, err := os.Stat(f); err != nil || st.Size() == 0 {
		f = i.LogPath()
	}
	b, err := os.ReadFile(f)
	if err != nil || len(b) == 0 {
		i.logf("the broker wrote no log yet (%s is empty)", i.console)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	i.c.rawStderr(fmt.Sprintf("---- last 40 lines of %s ----\n%s\n----\n", f, strings.Join(lines, "\n")))
}

func (i *Instance) consoleText() string {
	b, _ := os.ReadFile(i.console)
	return string(b)
}

var reBackupReady = regexp.MustCompile(`AMQ221024|AMQ221010`)

// waitReady waits until the AMQP port accepts connections and this run's
// log says the AMQP acceptor started (and the TLS port, if any, accepts); for a pair's backup, until it says it
// is synchronized with the primary (AMQ221024) or active (AMQ221010).
func (i *Instance) waitReady(pid int, amqp string) error {
	started := regexp.MustCompile(`AMQ221020: Started [A-Z]+ Acceptor at 127\.0\.0\.1:` + regexp.QuoteMeta(amqp) + ` for protocols \[AMQP\]`)
	deadline := time.Now().Add(i.c.StartTimeout)
	for {
		if !alive(pid) {
			i.logf("broker process %d exited during start-up", pid)
			i.logTail()
			_ = os.Remove(i.pidFile)
			return &ExitError{Code: 1, Msg: "broker exited during start-up"}
		}
		if i.waitBackup {
			if reBackupReady.MatchString(i.consoleText()) {
				return nil
			}
		} else if started.MatchString(i.consoleText()) && portOpen(amqp) && (i.Get("TLS_PORT") == "" || portOpen(i.Get("TLS_PORT"))) {
			return nil
		}
		if time.Now().After(deadline) {
			secs := int(i.c.StartTimeout / time.Second)
			if i.waitBackup {
				i.logf("backup did not report AMQ221024 (synchronized with the primary) within %d s", secs)
			} else {
				i.logf("broker did not accept AMQP connections on 127.0.0.1:%s within %d s", amqp, secs)
			}
			i.logTail()
			i.logf("stopping the half-started broker (pid %d)", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = os.Remove(i.pidFile)
			return &ExitError{Code: 1, Msg: "broker did not become ready"}
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// need fails unless cmd is on the PATH.
func (c *Ctl) need(logName, cmd, what, pkg string) error {
	if _, err := exec.LookPath(cmd); err != nil {
		return c.die(logName, "'%s' not found: install %s (e.g. apt-get install %s)", cmd, what, pkg)
	}
	return nil
}

// StartNode starts the instance unless it runs already, and waits until it
// is ready: its AMQP acceptor is up, or, for a pair's backup, it
// replicates.
func (i *Instance) StartNode() error {
	unlock, err := i.c.lock(i.Name, "instance-"+i.Name)
	if err != nil {
		return err
	}
	defer unlock()
	if pid, ok := i.Pid(); ok {
		if err := i.waitReady(pid, i.Get("AMQP_PORT")); err != nil {
			return err
		}
		i.logf("already running (pid %d): %s", pid, redactURL(i.URL()))
		return nil
	}
	// The ports first: a taken one fails the start at once, before
	// minutes of fetching and unpacking Artemis and creating the instance.
	// The last ports count only of an instance that ensure keeps (one it
	// creates anew starts from the defaults).
	lastAMQP, lastCore := "", ""
	if i.created() {
		lastAMQP, lastCore = i.Get("AMQP_PORT"), i.Get("CORE_PORT")
	}
	avoid := strings.Fields(i.c.getenv("AVOID_PORTS"))
	amqp, err := i.pickPort("AMQP", i.amqpPortEnv, lastAMQP, "5672", avoid)
	if err != nil {
		return err
	}
	core, err := i.pickPort("CORE", i.corePortEnv, lastCore, "61616", append([]string{amqp}, avoid...))
	if err != nil {
		return err
	}
	if err := i.c.need(i.Name, "java", "a Java runtime, 17 or newer", "openjdk-17-jre-headless"); err != nil {
		return err
	}
	if err := i.c.need(i.Name, "mvn", "Apache Maven", "maven"); err != nil {
		return err
	}
	t0 := time.Now()
	if err := i.c.EnsureDist(i.Name); err != nil {
		return err
	}
	if err := i.ensure(); err != nil {
		return err
	}
	tlsPort := ""
	if i.hasTLS() {
		if err := i.ensureTLS(); err != nil {
			return err
		}
		// A taken TLS port never fails a start: nothing is configured
		// against it but what start prints, so any free one will do.
		strict := i.anyPort
		if strict != "fresh" {
			i.anyPort = "1"
		}
		tlsPort, err = i.pickPort("TLS", i.c.getenv("ARTEMIS_TLS_PORT"), i.Get("TLS_PORT"), "5671", append([]string{amqp, core}, avoid...))
		i.anyPort = strict
		if err != nil {
			return err
		}
	}
	amqpN, _ := strconv.Atoi(amqp)
	coreN, _ := strconv.Atoi(core)
	tlsN, _ := strconv.Atoi(tlsPort)
	if err := i.configure(amqpN, coreN, tlsN); err != nil {
		return err
	}
	if err := i.writeState(amqp, core, i.Get("USER"), i.Get("PASSWORD")); err != nil {
		return i.die("%v", err)
	}
	if tlsPort != "" {
		if err := i.set("TLS_PORT", tlsPort); err != nil {
			return i.die("%v", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(i.console), 0o755); err != nil {
		return i.die("%v", err)
	}
	logf, err := os.OpenFile(i.console, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return i.die("%v", err)
	}
	if tlsPort != "" {
		i.logf("starting broker (AMQP 127.0.0.1:%s, AMQP over TLS 127.0.0.1:%s, CORE 127.0.0.1:%s) ...", amqp, tlsPort, core)
	} else {
		i.logf("starting broker (AMQP 127.0.0.1:%s, CORE 127.0.0.1:%s) ...", amqp, core)
	}
	// A session of its own, no inherited stdio: the broker outlives its
	// caller and the caller's pipes, and a terminal's Ctrl-C does not hit it.
	cmd := exec.Command(filepath.Join(i.Dir, "bin", "artemis"), "run")
	cmd.Env = i.c.childEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return i.die("broker did not start: %v", err)
	}
	pid := cmd.Process.Pid
	// Reap it if it ends while this process lives (a test calling the
	// package); otherwise init does.
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(i.pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return i.die("%v", err)
	}
	if err := i.waitReady(pid, amqp); err != nil {
		return err
	}
	secs := int(time.Since(t0) / time.Second)
	if i.waitBackup {
		i.logf("backup is up and replicating (pid %d) after %d s; it will serve %s once active", pid, secs, redactURL(i.URL()))
	} else {
		i.logf("broker is up (pid %d) after %d s: %s", pid, secs, redactURL(i.URL()))
	}
	return nil
}

// stopPid sends signal and waits up to timeout for pid to go away.
func stopPid(pid int, signal syscall.Signal, timeout time.Duration) bool {
	if err := syscall.Kill(pid, signal); err != nil {
		return true
	}
	deadline := time.Now().Add(timeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
	return true
}

// Stop stops the broker: SIGTERM, then SIGKILL after the stop timeout.
func (i *Instance) Stop() error {
	if !exists(i.Dir) {
		i.logf("no instance at %s: nothing to stop", i.Dir)
		return nil
	}
	unlock, err := i.c.lock(i.Name, "instance-"+i.Name)
	if err != nil {
		return err
	}
	defer unlock()
	pid, ok := i.Pid()
	if !ok {
		_ = os.Remove(i.pidFile)
		i.logf("not running")
		return nil
	}
	i.logf("stopping broker (pid %d) ...", pid)
	if !stopPid(pid, syscall.SIGTERM, i.c.StopTimeout) {
		i.logf("still running after %d s: SIGKILL", int(i.c.StopTimeout/time.Second))
		if !stopPid(pid, syscall.SIGKILL, 30*time.Second) {
			return i.die("could not kill pid %d", pid)
		}
	}
	_ = os.Remove(i.pidFile)
	i.logf("stopped")
	return nil
}

// Kill SIGKILLs the broker and returns the moment of the signal; the zero
// time when it was not running. A later start recovers the journal.
func (i *Instance) Kill() (time.Time, error) {
	if !exists(i.Dir) {
		i.logf("no instance at %s", i.Dir)
		return time.Time{}, nil
	}
	unlock, err := i.c.lock(i.Name, "instance-"+i.Name)
	if err != nil {
		return time.Time{}, err
	}
	defer unlock()
	pid, ok := i.Pid()
	if !ok {
		i.logf("not running")
		return time.Time{}, nil
	}
	t0 := time.UnixMilli(nowMS())
	i.logf("SIGKILL broker (pid %d)", pid)
	if !stopPid(pid, syscall.SIGKILL, 30*time.Second) {
		return t0, i.die("pid %d survived SIGKILL", pid)
	}
	_ = os.Remove(i.pidFile)
	i.logf("pid %d is gone (%d ms after the signal)", pid, nowMS()-t0.UnixMilli())
	return t0, nil
}

// Reset stops the broker and deletes the instance.
func (i *Instance) Reset() error {
	if err := i.Stop(); err != nil {
		return err
	}
	unlock, err := i.c.lock(i.Name, "instance-"+i.Name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.RemoveAll(i.Dir); err != nil {
		return i.die("%v", err)
	}
	i.logf("instance %s deleted", i.Name)
	return nil
}
