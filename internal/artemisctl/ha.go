package artemisctl

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Pair is a replication pair: the instances <Name>-primary and
// <Name>-backup on loopback, each on ports chosen at creation and kept.
type Pair struct {
	c    *Ctl
	Name string
}

// Pair returns the pair name (ARTEMIS_HA_NAME, default "ha").
func (c *Ctl) Pair(name string) *Pair {
	if name == "" {
		name = "ha"
	}
	return &Pair{c: c, Name: name}
}

func (p *Pair) logName() string { return "ha:" + p.Name }

// haLocks is the folder of the pair's lock and activation sequence, which
// both nodes share (Artemis's file lock manager): Base/ha-locks/<pair>.
func (c *Ctl) haLocks(pair string) string { return filepath.Join(c.Base, "ha-locks", pair) }

// Node returns the pair's node role ("primary" or "backup").
func (p *Pair) Node(role string) (*Instance, error) {
	if role != "primary" && role != "backup" {
		return nil, p.c.die(p.logName(), "the node is primary or backup, not '%s'", role)
	}
	i, err := p.c.node(p.Name + "-" + role)
	if err != nil {
		return nil, err
	}
	i.waitBackup = role == "backup"
	return i, nil
}

// nodeState is "active", "backup" (running, no AMQP acceptor) or "stopped".
func nodeState(i *Instance) string {
	if !i.running() {
		return "stopped"
	}
	if portOpen(i.Get("AMQP_PORT")) {
		return "active"
	}
	return "backup"
}

// create makes both instances on first use, on four fresh free ports.
func (p *Pair) create() error {
	pri, err := p.Node("primary")
	if err != nil {
		return err
	}
	bak, err := p.Node("backup")
	if err != nil {
		return err
	}
	if exists(pri.state) && pri.Get("HA_ROLE") != "" && exists(bak.state) && bak.Get("HA_ROLE") != "" {
		return nil
	}
	ports, err := freePorts(4)
	if err != nil {
		return p.c.die(p.logName(), "no free ports: %v", err)
	}
	p.c.logf(p.logName(), "creating the replication pair %s-primary/%s-backup (AMQP %d/%d, CORE %d/%d)",
		p.Name, p.Name, ports[0], ports[2], ports[1], ports[3])
	if err := initNode(pri, "instance-"+pri.Name, ports[0], ports[1], map[string]string{"HA_ROLE": "primary", "HA_PEER_CORE": fmt.Sprint(ports[3])}, "ha-reset"); err != nil {
		return err
	}
	return initNode(bak, "instance-"+bak.Name, ports[2], ports[3], map[string]string{"HA_ROLE": "backup", "HA_PEER_CORE": fmt.Sprint(ports[1])}, "ha-reset")
}

// initNode (re)creates a pair's or a cluster's node with its ports and the
// state keys of kv (in a fixed order).
func initNode(i *Instance, lockName string, amqp, core int, kv map[string]string, reset string) error {
	unlock, err := i.c.lock(i.Name, lockName)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := i.Pid(); ok {
		what := "HA"
		if reset == "cluster-reset" {
			what = "cluster"
		}
		return i.die("%s is running but has no %s settings: %s first", i.Name, what, reset)
	}
	if err := removeAll(i.Dir); err != nil {
		return i.die("%v", err)
	}
	if err := i.ensure(); err != nil {
		return err
	}
	if err := i.writeState(fmt.Sprint(amqp), fmt.Sprint(core), i.Get("USER"), i.Get("PASSWORD")); err != nil {
		return i.die("%v", err)
	}
	for _, k := range []string{"HA_ROLE", "HA_PEER_CORE", "CLUSTER_SIZE", "CLUSTER_PEERS", "CLUSTER_ROUTER_PORT"} {
		if v, ok := kv[k]; ok && v != "" {
			if err := i.set(k, v); err != nil {
				return i.die("%v", err)
			}
		}
	}
	return nil
}

// Env returns the pair's export lines.
func (p *Pair) Env() (string, error) {
	var urls []string
	nodes := map[string]*Instance{}
	for _, role := range []string{"primary", "backup"} {
		i, err := p.Node(role)
		if err != nil {
			return "", err
		}
		u := i.URL()
		if u == "" {
			return "", p.c.die(p.logName(), "the pair %s is not created (use: scripts/artemis ha-start)", p.Name)
		}
		urls = append(urls, u)
		nodes[role] = i
	}
	var b strings.Builder
	fmt.Fprintf(&b, "export ARTEMIS_HA_NAME=%s\n", shellQuote(p.Name))
	fmt.Fprintf(&b, "export ARTEMIS_HA_URLS=%s\n", shq(strings.Join(urls, ",")))
	for _, role := range []string{"primary", "backup"} {
		i := nodes[role]
		up := strings.ToUpper(role)
		pid := ""
		if n, ok := i.Pid(); ok {
			pid = fmt.Sprint(n)
		}
		fmt.Fprintf(&b, "export ARTEMIS_HA_%s_URL=%s\n", up, shellQuote(i.URL()))
		fmt.Fprintf(&b, "export ARTEMIS_HA_%s_CORE_URL=%s\n", up, shellQuote(i.CoreURL()))
		fmt.Fprintf(&b, "export ARTEMIS_HA_%s_DIR=%s\n", up, shellQuote(i.Dir))
		fmt.Fprintf(&b, "export ARTEMIS_HA_%s_PID=%s\n", up, shellQuote(pid))
		if role == "primary" {
			fmt.Fprintf(&b, "export ARTEMIS_USER=%s\n", shellQuote(i.Get("USER")))
			fmt.Fprintf(&b, "export ARTEMIS_PASSWORD=%s\n", shellQuote(i.Get("PASSWORD")))
		}
	}
	fmt.Fprintf(&b, "export ARTEMIS_HOME=%s\n", shellQuote(p.c.Dist))
	return b.String(), nil
}

// Start creates the pair on first use and starts both nodes: the primary
// (until its AMQP acceptor is up), then the backup (until it is
// synchronized with the primary, AMQ221024). A primary whose journal is
// older than the pair's (the pair was stopped while its backup served)
// cannot become active on its own: it waits as a backup for the node with
// the newest journal, so the backup is started at once then, serves,
// synchronizes the primary and hands back to it.
func (p *Pair) Start() error {
	if err := p.c.need(p.logName(), "java", "a Java runtime, 17 or newer", "openjdk-17-jre-headless"); err != nil {
		return err
	}
	if err := p.c.need(p.logName(), "mvn", "Apache Maven", "maven"); err != nil {
		return err
	}
	if err := p.c.EnsureDist(p.logName()); err != nil {
		return err
	}
	if err := p.create(); err != nil {
		return err
	}
	pri, _ := p.Node("primary")
	bak, _ := p.Node("backup")
	t0 := time.Now()
	priDone := make(chan error, 1)
	go func() { priDone <- pri.StartNode() }()
	var priErr error
	started := false
	for wait := true; wait; {
		select {
		case priErr = <-priDone:
			wait = false
		case <-time.After(300 * time.Millisecond):
			if _, ok := logLineSince(pri, reNotCandidate, t0); ok {
				p.c.logf(p.logName(), "the primary's journal is older than the pair's (it waits as a backup): starting the backup, which holds the newest")
				if err := bak.StartNode(); err != nil {
					return err
				}
				started = true
				priErr = <-priDone
				wait = false
			}
		}
	}
	if priErr != nil {
		return priErr
	}
	if !started {
		if err := bak.StartNode(); err != nil {
			return err
		}
	}
	if err := p.waitWhole(bak, t0); err != nil {
		return err
	}
	p.c.logf(p.logName(), "pair %s: primary %s, backup %s", p.Name, nodeState(pri), nodeState(bak))
	return nil
}

// The log lines a pair's start and restart wait for: a node whose journal
// is older than the pair's cannot become active ("Not a candidate for
// NodeID ... activation"); a backup synchronized with its primary
// (AMQ221024), then announced to it (AMQ221031).
var (
	reNotCandidate  = regexp.MustCompile(`Not a candidate for NodeID = \S+ activation`)
	reSynchronized  = regexp.MustCompile(`AMQ221024: Backup server .* is synchronized with primary server`)
	reBackupAnnounc = regexp.MustCompile(`AMQ221031: backup announced`)
)

// waitWhole waits until the backup, since t0, is synchronized with the
// primary and announced (AMQ221024, then AMQ221031 in its log): the pair
// is whole again, a failover would lose nothing.
func (p *Pair) waitWhole(bak *Instance, t0 time.Time) error {
	deadline := time.Now().Add(p.c.StartTimeout)
	for {
		if at, ok := logLineSince(bak, reSynchronized, t0); ok {
			if _, ok := logLineSince(bak, reBackupAnnounc, at); ok {
				p.c.logf(p.logName(), "pair whole: the backup is synchronized with the primary (AMQ221024) and announced (AMQ221031), %d ms after the start", nowMS()-t0.UnixMilli())
				return nil
			}
		}
		if !bak.running() {
			return p.c.die(p.logName(), "the backup stopped before it synchronized with the primary (%s)", bak.LogPath())
		}
		if time.Now().After(deadline) {
			return p.c.die(p.logName(), "the backup did not synchronize with the primary (AMQ221024, AMQ221031) within %d s (%s)",
				int(p.c.StartTimeout/time.Second), bak.LogPath())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logLineSince returns the stamp of the first line of i's log (its
// console: the JVM's output, which a restart within the JVM keeps) stamped
// at or after since that matches re.
func logLineSince(i *Instance, re *regexp.Regexp, since time.Time) (time.Time, bool) {
	since = since.Truncate(time.Millisecond)
	for _, l := range strings.Split(i.consoleText(), "\n") {
		if len(l) < len(logStamp) || !re.MatchString(l) {
			continue
		}
		at, err := time.ParseInLocation(logStamp, l[:len(logStamp)], time.Local)
		if err == nil && !at.Before(since) {
			return at, true
		}
	}
	return time.Time{}, false
}

// logStamp is the time stamp that starts each line of an Artemis log
// (log4j2 "%d": local time, milliseconds after a comma).
const logStamp = "2006-01-02 15:04:05,000"

// Status returns one line per node; ok is false when one is stopped.
func (p *Pair) Status() (string, bool) {
	var b strings.Builder
	ok := true
	for _, role := range []string{"primary", "backup"} {
		i, _ := p.Node(role)
		st := nodeState(i)
		if st == "stopped" {
			ok = false
		}
		pid := "-"
		if n, running := i.Pid(); running {
			pid = fmt.Sprint(n)
		}
		fmt.Fprintf(&b, "%s: %s, instance %s, pid %s, AMQP 127.0.0.1:%s, CORE 127.0.0.1:%s\n", role, st, i.Name, pid, i.Get("AMQP_PORT"), i.Get("CORE_PORT"))
	}
	return b.String(), ok
}

// Kill SIGKILLs the node role and returns the moment of the signal (the
// zero time when it was not running). For the primary, unless noWait, it
// then waits until the backup's AMQP acceptor is up.
func (p *Pair) Kill(role string, noWait bool) (time.Time, error) {
	i, err := p.Node(role)
	if err != nil {
		return time.Time{}, err
	}
	t0, err := i.Kill()
	if err != nil || t0.IsZero() {
		if err == nil {
			p.c.logf(p.logName(), "the %s was not running", role)
		}
		return t0, err
	}
	p.c.printf("export ARTEMIS_HA_KILLED_AT_MS=%d\n", t0.UnixMilli())
	if role == "primary" && !noWait {
		bak, _ := p.Node("backup")
		if nodeState(bak) != "stopped" {
			ms, err := p.waitActive(bak, t0)
			if err != nil {
				return t0, err
			}
			p.c.logf(p.logName(), "backup active (AMQP acceptor up) %d ms after the SIGKILL of the primary", ms)
		}
	}
	return t0, nil
}

// waitActive waits until i's AMQP acceptor is up; it returns the
// milliseconds since t0.
func (p *Pair) waitActive(i *Instance, t0 time.Time) (int64, error) {
	amqp := i.Get("AMQP_PORT")
	deadline := time.Now().Add(p.c.StartTimeout)
	role := strings.TrimPrefix(i.Name, p.Name+"-")
	for !portOpen(amqp) {
		if time.Now().After(deadline) {
			return 0, p.c.die(p.logName(), "the %s did not become active (AMQP 127.0.0.1:%s) within %d s", role, amqp, int(p.c.StartTimeout/time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nowMS() - t0.UnixMilli(), nil
}

// Restart starts the node role again. A restarted primary finds its
// journal older than the pair's (the backup served meanwhile): it starts
// as a backup, synchronizes from the active backup, which then hands back
// and becomes the backup again (fail-back). Restart returns once the pair
// is whole: the primary's AMQP acceptor up, and the backup synchronized
// with it again and announced (AMQ221024, AMQ221031). A backup restarted
// returns once it is synchronized with the primary.
func (p *Pair) Restart(role string) error {
	i, err := p.Node(role)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := i.StartNode(); err != nil {
		return err
	}
	if role == "primary" {
		bak, _ := p.Node("backup")
		p.c.logf(p.logName(), "primary active again %d ms after its restart; backup: %s", nowMS()-t0.UnixMilli(), nodeState(bak))
		if nodeState(bak) == "stopped" {
			p.c.logf(p.logName(), "the backup is stopped: the pair is not whole (ha-restart backup)")
			return nil
		}
		return p.waitWhole(bak, t0)
	}
	return nil
}

// Stop stops both nodes, the backup first (so no failover).
func (p *Pair) Stop() error {
	for _, role := range []string{"backup", "primary"} {
		i, _ := p.Node(role)
		if err := i.Stop(); err != nil {
			return err
		}
	}
	return nil
}

// Reset stops and deletes both nodes, and their lock folder (its
// activation sequence belongs to the deleted journals).
func (p *Pair) Reset() error {
	for _, role := range []string{"backup", "primary"} {
		i, _ := p.Node(role)
		if err := i.Reset(); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(p.c.haLocks(p.Name)); err != nil {
		return p.c.die(p.logName(), "%v", err)
	}
	return nil
}
