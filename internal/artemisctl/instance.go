package artemisctl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Instance is one broker instance: <root>/.artemis/instances/<Name>.
type Instance struct {
	c       *Ctl
	Name    string
	Dir     string
	state   string // babelqueue.state: KEY=value lines
	pidFile string
	console string // log/console.log: the broker's stdout and stderr of its current run

	// The port rules of this instance's start: ARTEMIS_AMQP_PORT,
	// ARTEMIS_CORE_PORT, ARTEMIS_ANY_PORT (a pair's and a cluster's nodes
	// have none of them: their ports are strict).
	amqpPortEnv, corePortEnv, anyPort string
	// waitBackup: a start waits until the node replicates (a pair's
	// backup opens no acceptor), not for its AMQP acceptor.
	waitBackup bool
}

// Instance returns the instance name, with the port rules of the
// environment. The name must be valid (ValidName).
func (c *Ctl) Instance(name string) (*Instance, error) {
	if !ValidName(name) {
		return nil, c.badName(name)
	}
	dir := filepath.Join(c.Base, "instances", name)
	return &Instance{
		c: c, Name: name, Dir: dir,
		state:       filepath.Join(dir, "babelqueue.state"),
		pidFile:     filepath.Join(dir, "babelqueue.pid"),
		console:     filepath.Join(dir, "log", "console.log"),
		amqpPortEnv: c.getenv("ARTEMIS_AMQP_PORT"),
		corePortEnv: c.getenv("ARTEMIS_CORE_PORT"),
		anyPort:     c.getenv("ARTEMIS_ANY_PORT"),
	}, nil
}

// node is a pair's or a cluster's node: strict ports, whatever the
// environment says.
func (c *Ctl) node(name string) (*Instance, error) {
	i, err := c.Instance(name)
	if err != nil {
		return nil, err
	}
	i.amqpPortEnv, i.corePortEnv, i.anyPort = "", "", "0"
	return i, nil
}

func (i *Instance) logf(format string, args ...any) { i.c.logf(i.Name, format, args...) }
func (i *Instance) die(format string, args ...any) error {
	return i.c.die(i.Name, format, args...)
}

// LogPath is the broker's log file.
func (i *Instance) LogPath() string { return filepath.Join(i.Dir, "log", "artemis.log") }

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// ---- state ----------------------------------------------------------------

func (i *Instance) stateLines() []string {
	b, err := os.ReadFile(i.state)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// Get returns the last value of key in the state file ("" if none).
func (i *Instance) Get(key string) string {
	v := ""
	for _, l := range i.stateLines() {
		if val, ok := strings.CutPrefix(l, key+"="); ok {
			v = val
		}
	}
	return v
}

func (i *Instance) getInt(key string) int {
	n, _ := strconv.Atoi(i.Get(key))
	return n
}

func (i *Instance) writeStateLines(lines []string) error {
	tmp := i.state + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, i.state)
}

var reKeptState = regexp.MustCompile(`^(HA|CLUSTER)_[A-Z_]+=`)

// writeState writes the ports and credentials, keeping the pair's and the
// cluster's settings.
func (i *Instance) writeState(amqp, core, user, password string) error {
	lines := []string{"AMQP_PORT=" + amqp, "CORE_PORT=" + core, "USER=" + user, "PASSWORD=" + password}
	for _, l := range i.stateLines() {
		if reKeptState.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return i.writeStateLines(lines)
}

// set sets one key of the state file.
func (i *Instance) set(key, value string) error {
	var lines []string
	for _, l := range i.stateLines() {
		if l != "" && !strings.HasPrefix(l, key+"=") {
			lines = append(lines, l)
		}
	}
	return i.writeStateLines(append(lines, key+"="+value))
}

// URL is the instance's AMQP URL with its credentials ("" before the first
// start).
func (i *Instance) URL() string {
	amqp := i.Get("AMQP_PORT")
	if !exists(i.state) || amqp == "" {
		return ""
	}
	return "amqp://" + urlencode(i.Get("USER")) + ":" + urlencode(i.Get("PASSWORD")) + "@127.0.0.1:" + amqp
}

// CoreURL is the instance's CORE URL (for the CLI).
func (i *Instance) CoreURL() string { return "tcp://127.0.0.1:" + i.Get("CORE_PORT") }

// ---- processes --------------------------------------------------------------

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if j := strings.LastIndexByte(s, ')'); j >= 0 && j+2 < len(s) {
		return s[j+2] != 'Z'
	}
	return true
}

// instanceOf returns the -Dartemis.instance=<dir> argument of pid's
// command line ("" if none): it identifies a broker exactly.
func instanceOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	for _, a := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(a, []byte("-Dartemis.instance=")); ok {
			return string(v)
		}
	}
	return ""
}

func (i *Instance) isBrokerPid(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	want := []byte("-Dartemis.instance=" + i.Dir)
	for _, a := range bytes.Split(b, []byte{0}) {
		if bytes.Equal(a, want) {
			return true
		}
	}
	return false
}

// Pid returns the broker's pid if it runs: the pid file's, else (the file
// lost or stale) a java process started for this instance, which is then
// written to the pid file.
func (i *Instance) Pid() (int, bool) {
	if b, err := os.ReadFile(i.pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && i.isBrokerPid(pid) {
			return pid, true
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if i.isBrokerPid(pid) {
			_ = os.WriteFile(i.pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644)
			return pid, true
		}
	}
	return 0, false
}

func (i *Instance) running() bool { _, ok := i.Pid(); return exists(i.Dir) && ok }

// ---- ports ----------------------------------------------------------------

// portOpen reports whether 127.0.0.1:port accepts a connection.
func portOpen(port string) bool {
	if port == "" {
		return false
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// portBindable reports whether 127.0.0.1:port can be bound (with
// SO_REUSEADDR, as the broker binds).
func portBindable(port string) bool {
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 {
		return false
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// FreePort returns a port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

var reSSUser = regexp.MustCompile(`users:\(\("([^"]*)",pid=([0-9]+)`)

// portHolder describes what listens on port, as far as ss tells ("" when
// it cannot).
func portHolder(port string) string {
	if _, err := exec.LookPath("ss"); err != nil {
		return ""
	}
	out, err := exec.Command("ss", "-Hltnp", "sport = :"+port).Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if line == "" {
		return ""
	}
	m := reSSUser.FindStringSubmatch(line)
	if m == nil {
		fields := strings.Fields(line)
		addr := ""
		if len(fields) >= 4 {
			addr = fields[3]
		}
		return fmt.Sprintf("a process this user cannot see (%s)", addr)
	}
	s := fmt.Sprintf("%s (pid %s)", m[1], m[2])
	if pid, err := strconv.Atoi(m[2]); err == nil {
		if inst := instanceOf(pid); inst != "" {
			s += ", the Artemis instance " + inst
		}
	}
	return s
}

// pickPort chooses a port: the explicit one (it must be free), else the
// last one this instance used, else def. When that one is taken the start
// fails naming the port and what holds it, unless ARTEMIS_ANY_PORT=1 says
// any free port will do; with ARTEMIS_ANY_PORT=fresh a new free port is
// taken even when the old one is free. Ports in avoid are never chosen.
func (i *Instance) pickPort(label, explicit, last, def string, avoid []string) (string, error) {
	avoided := func(p string) bool {
		for _, a := range avoid {
			if a == p {
				return true
			}
		}
		return false
	}
	holderOf := func(p string) string {
		if h := portHolder(p); h != "" {
			return " by " + h
		}
		return ""
	}
	if explicit != "" {
		if !portBindable(explicit) || avoided(explicit) {
			return "", i.die("%s port 127.0.0.1:%s (ARTEMIS_%s_PORT) is in use%s", label, explicit, label, holderOf(explicit))
		}
		return explicit, nil
	}
	p := last
	if p == "" {
		p = def
	}
	anyPort := i.anyPort
	if anyPort == "" {
		anyPort = "0"
	}
	if anyPort != "fresh" && !avoided(p) && portBindable(p) {
		return p, nil
	}
	if anyPort == "0" {
		holder := holderOf(p)
		why := "the default"
		if last != "" {
			why = "the port this instance used last"
		}
		if avoided(p) {
			holder = " by this instance's other acceptor"
		}
		return "", i.die("%s port 127.0.0.1:%s (%s) is taken%s. Free it, choose one (ARTEMIS_%s_PORT=N), or let the broker "+
			"take any free port (ARTEMIS_ANY_PORT=1; then use the ARTEMIS_URL it prints: eval \"$(scripts/artemis start)\")",
			label, p, why, holder, label)
	}
	var q string
	for range 5 {
		n, err := FreePort()
		if err != nil {
			return "", i.die("no free port: %v", err)
		}
		q = strconv.Itoa(n)
		if !avoided(q) {
			break
		}
	}
	if anyPort != "fresh" {
		i.logf("%s port %s is taken; ARTEMIS_ANY_PORT=1: using free port %s", label, p, q)
	}
	return q, nil
}

// ---- locks ------------------------------------------------------------------

// lock takes the lock <base>/locks/<name>.lock (flock, shared with the
// old shell script's), waiting up to 300 s. The returned func releases it.
// Its descriptor is close-on-exec: a broker never holds it.
func (c *Ctl) lock(logName, name string) (func(), error) {
	dir := filepath.Join(c.Base, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, c.die(logName, "%v", err)
	}
	path := filepath.Join(dir, name+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, c.die(logName, "%v", err)
	}
	deadline := time.Now().Add(300 * time.Second)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, c.die(logName, "could not lock %s: %v", path, err)
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, c.die(logName, "could not lock %s within 300 s", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ---- configuration ----------------------------------------------------------

// configure rewrites etc/broker.xml (and the users, roles and heap) for the
// ports amqp and core; a pair's or a cluster's node gets its settings too.
func (i *Instance) configure(amqp, core int) error {
	fsync := i.c.getenv("ARTEMIS_FSYNC") == "true"
	path := filepath.Join(i.Dir, "etc", "broker.xml")
	b, err := os.ReadFile(path)
	if err != nil {
		return i.die("%v", err)
	}
	orig := string(b)
	xml, err := ConfigureBase(orig, amqp, core, fsync)
	if err != nil {
		return i.die("%v", err)
	}
	if role := i.Get("HA_ROLE"); role != "" {
		peer := i.getInt("HA_PEER_CORE")
		if peer == 0 {
			return i.die("HA node %s has no peer port in %s (recreate the pair: ha-reset)", i.Name, i.state)
		}
		if xml, err = ConfigureHA(xml, core, role, peer, i.Get("USER"), i.Get("PASSWORD")); err != nil {
			return i.die("%v", err)
		}
	}
	if peers := i.Get("CLUSTER_PEERS"); peers != "" {
		var ps []int
		for _, f := range strings.Fields(peers) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return i.die("bad CLUSTER_PEERS in %s: %q", i.state, peers)
			}
			ps = append(ps, n)
		}
		if xml, err = ConfigureCluster(xml, core, ps, i.getInt("CLUSTER_ROUTER_PORT"), i.Get("USER"), i.Get("PASSWORD")); err != nil {
			return i.die("%v", err)
		}
	}
	if xml != orig {
		if err := writeFileAtomic(path, xml); err != nil {
			return i.die("%v", err)
		}
	}
	// The second login, nodlq/nodlq-pw (role nodlq), in plain text: the
	// properties login module takes a value that is not ENC(...) as the
	// password itself.
	for _, f := range [][2]string{{"artemis-users.properties", "nodlq = nodlq-pw"}, {"artemis-roles.properties", "nodlq = nodlq"}} {
		p := filepath.Join(i.Dir, "etc", f[0])
		b, err := os.ReadFile(p)
		if err != nil {
			return i.die("%v", err)
		}
		if out, changed := AddNodlq(string(b), f[1]); changed {
			if err := writeFileAtomic(p, out); err != nil {
				return i.die("%v", err)
			}
		}
	}
	xms, xmx := i.c.getenv("ARTEMIS_JAVA_XMS"), i.c.getenv("ARTEMIS_JAVA_XMX")
	if xms == "" {
		xms = "256m"
	}
	if xmx == "" {
		xmx = "1g"
	}
	if !reHeapSize.MatchString(xms) {
		return i.die("ARTEMIS_JAVA_XMS=%s is not a heap size like 256m", xms)
	}
	if !reHeapSize.MatchString(xmx) {
		return i.die("ARTEMIS_JAVA_XMX=%s is not a heap size like 1g", xmx)
	}
	p := filepath.Join(i.Dir, "etc", "artemis.profile")
	b, err = os.ReadFile(p)
	if err != nil {
		return i.die("%v", err)
	}
	if out := SetHeap(string(b), xms, xmx); out != string(b) {
		if err := writeFileAtomic(p, out); err != nil {
			return i.die("%v", err)
		}
	}
	return nil
}

func writeFileAtomic(path, text string) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ---- start, stop, kill ------------------------------------------------------

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
// log says the AMQP acceptor started; for a pair's backup, until it says it
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
		} else if started.MatchString(i.consoleText()) && portOpen(amqp) {
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
	avoid := strings.Fields(i.c.getenv("AVOID_PORTS"))
	amqp, err := i.pickPort("AMQP", i.amqpPortEnv, i.Get("AMQP_PORT"), "5672", avoid)
	if err != nil {
		return err
	}
	core, err := i.pickPort("CORE", i.corePortEnv, i.Get("CORE_PORT"), "61616", append([]string{amqp}, avoid...))
	if err != nil {
		return err
	}
	amqpN, _ := strconv.Atoi(amqp)
	coreN, _ := strconv.Atoi(core)
	if err := i.configure(amqpN, coreN); err != nil {
		return err
	}
	if err := i.writeState(amqp, core, i.Get("USER"), i.Get("PASSWORD")); err != nil {
		return i.die("%v", err)
	}
	if err := os.MkdirAll(filepath.Dir(i.console), 0o755); err != nil {
		return i.die("%v", err)
	}
	logf, err := os.OpenFile(i.console, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return i.die("%v", err)
	}
	i.logf("starting broker (AMQP 127.0.0.1:%s, CORE 127.0.0.1:%s) ...", amqp, core)
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

// Env returns the export lines of a running instance.
func (i *Instance) Env() string {
	var b strings.Builder
	fmt.Fprintf(&b, "export ARTEMIS_URL=%s\n", shellQuote(i.URL()))
	fmt.Fprintf(&b, "export ARTEMIS_CORE_URL=%s\n", shellQuote(i.CoreURL()))
	fmt.Fprintf(&b, "export ARTEMIS_USER=%s\n", shellQuote(i.Get("USER")))
	fmt.Fprintf(&b, "export ARTEMIS_PASSWORD=%s\n", shellQuote(i.Get("PASSWORD")))
	fmt.Fprintf(&b, "export ARTEMIS_HOME=%s\n", shellQuote(i.c.Dist))
	fmt.Fprintf(&b, "export ARTEMIS_INSTANCE_DIR=%s\n", shellQuote(i.Dir))
	return b.String()
}

// Status is the status line; ok is false when the broker does not run.
func (i *Instance) Status() (line string, ok bool) {
	if exists(i.Dir) {
		if pid, ok := i.Pid(); ok {
			amqp, core := i.Get("AMQP_PORT"), i.Get("CORE_PORT")
			if portOpen(amqp) {
				return fmt.Sprintf("running: instance %s, pid %d, AMQP 127.0.0.1:%s, CORE 127.0.0.1:%s, dir %s", i.Name, pid, amqp, core, i.Dir), true
			}
			return fmt.Sprintf("running (not accepting AMQP yet): instance %s, pid %d, AMQP 127.0.0.1:%s, CORE 127.0.0.1:%s", i.Name, pid, amqp, core), true
		}
		return fmt.Sprintf("stopped: instance %s (%s)", i.Name, i.Dir), false
	}
	return fmt.Sprintf("stopped: instance %s not created", i.Name), false
}

// cliArgs are the CLI's arguments: args, then --url/--user/--password.
func (i *Instance) cliArgs(args []string) []string {
	return append(append([]string(nil), args...), "--url", i.CoreURL(), "--user", i.Get("USER"), "--password", i.Get("PASSWORD"))
}

// readLines returns the lines of a file (nil if it cannot be read).
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
