package artemisctl

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestIntegrationInstanceLifecycle runs a real broker through start,
// status, kill, restart-after-kill and stop, and checks that it listens on
// loopback only. It needs Java and Maven and takes a JVM start or two, so
// it runs only when ARTEMISCTL_INTEGRATION is set; ARTEMISCTL_IT_NAME
// names the instance (default artemisctl-it).
func TestIntegrationInstanceLifecycle(t *testing.T) {
	if os.Getenv("ARTEMISCTL_INTEGRATION") == "" {
		t.Skip("ARTEMISCTL_INTEGRATION not set: this test starts a real Artemis broker in the repository's .artemis")
	}
	name := os.Getenv("ARTEMISCTL_IT_NAME")
	if name == "" {
		name = "artemisctl-it"
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	c := New(root, append(os.Environ(), "ARTEMIS_ANY_PORT=1", "ARTEMIS_INSTANCE="+name), &out, &errb)
	t.Cleanup(func() { t.Logf("stderr:\n%s", errb.String()) })
	i, err := c.Instance(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := i.Reset(); err != nil {
			t.Errorf("reset: %v", err)
		}
	})
	if err := i.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(i, false); err != nil {
		t.Fatal(err)
	}
	url := envLine(t, out.String(), "ARTEMIS_URL")
	if !strings.HasPrefix(url, "amqp://") || !strings.Contains(url, "@127.0.0.1:") {
		t.Fatalf("ARTEMIS_URL is %s", redactURL(url))
	}
	pid, ok := i.Pid()
	if !ok {
		t.Fatal("started, but no pid")
	}
	listening := listeningAddrs(t, pid)
	if len(listening) != 3 {
		t.Errorf("the broker listens on %v, want its three acceptors (CORE, AMQP, AMQP over TLS)", listening)
	}
	tlsURL := envLine(t, out.String(), "ARTEMIS_TLS_URL")
	if !strings.HasPrefix(tlsURL, "amqps://") || !strings.Contains(tlsURL, "@127.0.0.1:") || envLine(t, out.String(), "ARTEMIS_TLS_CA") != i.TLSCA() {
		t.Errorf("ARTEMIS_TLS_URL is %s, ARTEMIS_TLS_CA %s", redactURL(tlsURL), envLine(t, out.String(), "ARTEMIS_TLS_CA"))
	}
	for _, a := range listening {
		if a != "127.0.0.1" {
			t.Errorf("the broker listens on %s, not on loopback only (%v)", a, listening)
		}
	}
	if line, ok := i.Status(); !ok || !strings.HasPrefix(line, "running: instance "+name) {
		t.Errorf("status: %s", line)
	}
	at, err := i.Kill()
	if err != nil || at.IsZero() {
		t.Fatalf("kill: %v, %v", at, err)
	}
	if line, ok := i.Status(); ok {
		t.Errorf("killed, but status says %s", line)
	}
	out.Reset()
	if err := c.Start(i, true); err != nil {
		t.Fatal(err)
	}
	if got := envLine(t, out.String(), "ARTEMIS_URL"); got != url {
		t.Errorf("restarted on %s, not on %s", redactURL(got), redactURL(url))
	}
	if got := envLine(t, out.String(), "ARTEMIS_TLS_URL"); got != tlsURL {
		t.Errorf("TLS restarted on %s, not on %s", redactURL(got), redactURL(tlsURL))
	}
	if err := i.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, ok := i.Pid(); ok {
		t.Error("stopped, but the broker still runs")
	}
}

func envLine(t *testing.T, out, key string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "export "+key+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in the export lines", key)
	return ""
}

// listeningAddrs returns the local IPv4 address (IPv4-mapped for tcp6) of
// each TCP socket of pid in the LISTEN state.
func listeningAddrs(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	var addrs []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			hexAddr, _, _ := strings.Cut(f[1], ":")
			addrs = append(addrs, decodeProcAddr(hexAddr))
		}
	}
	return addrs
}

// decodeProcAddr turns /proc/net/tcp's address (little-endian words) into
// an IPv4 address; a tcp6 address gives its IPv4-mapped part, or "IPv6"
// when it is not one.
func decodeProcAddr(h string) string {
	if len(h) == 32 {
		if h[:24] != "0000000000000000FFFF0000" {
			return "IPv6 " + h
		}
		h = h[24:]
	}
	if len(h) != 8 {
		return "unknown " + h
	}
	var parts []string
	for k := 6; k >= 0; k -= 2 {
		n, _ := strconv.ParseUint(h[k:k+2], 16, 8)
		parts = append(parts, strconv.FormatUint(n, 10))
	}
	return strings.Join(parts, ".")
}

func TestDecodeProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F":                         "127.0.0.1",
		"00000000":                         "0.0.0.0",
		"0000000000000000FFFF00000100007F": "127.0.0.1",
		"00000000000000000000000000000000": "IPv6 00000000000000000000000000000000",
	} {
		if got := decodeProcAddr(in); got != want {
			t.Errorf("decodeProcAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
