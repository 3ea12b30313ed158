package artemisctl

import (
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

// The ports of an instance, and the locks that keep parallel callers apart.

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
