package artemisctl

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
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

// alive reports whether pid runs. A zombie whose threads have all exited
// does not (it has closed its files and sockets and only waits to be
// reaped, by this process if it started it); a process whose main thread
// has exited while other threads still tear down does.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 || j+2 >= len(s) || (s[j+2] != 'Z' && s[j+2] != 'X') {
		return true
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	return err == nil && len(tasks) > 1
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

// Env returns the export lines of a running instance.
func (i *Instance) Env() string {
	var b strings.Builder
	fmt.Fprintf(&b, "export ARTEMIS_URL=%s\n", shellQuote(i.URL()))
	fmt.Fprintf(&b, "export ARTEMIS_CORE_URL=%s\n", shellQuote(i.CoreURL()))
	fmt.Fprintf(&b, "export ARTEMIS_USER=%s\n", shellQuote(i.Get("USER")))
	fmt.Fprintf(&b, "export ARTEMIS_PASSWORD=%s\n", shellQuote(i.Get("PASSWORD")))
	fmt.Fprintf(&b, "export ARTEMIS_HOME=%s\n", shellQuote(i.c.Dist))
	fmt.Fprintf(&b, "export ARTEMIS_INSTANCE_DIR=%s\n", shellQuote(i.Dir))
	if u := i.TLSURL(); u != "" {
		fmt.Fprintf(&b, "export ARTEMIS_TLS_URL=%s\n", shellQuote(u))
		fmt.Fprintf(&b, "export ARTEMIS_TLS_CA=%s\n", shellQuote(i.TLSCA()))
	}
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
