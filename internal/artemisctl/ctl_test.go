package artemisctl

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The expected values are what bash's printf %q printed for the same
// strings (the old script quoted its export lines with it).
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"":                                 "''",
		"babel":                            "babel",
		"a b":                              `a\ b`,
		"it's":                             `it\'s`,
		"p@ss:w/rd":                        "p@ss:w/rd",
		"~home":                            `\~home`,
		"a=~b":                             `a=\~b`,
		"#x":                               `\#x`,
		"x#y":                              "x#y",
		"a,b":                              `a\,b`,
		"tab\tx":                           `$'tab\tx'`,
		"$HOME":                            `\$HOME`,
		"amqp://u:p@127.0.0.1:5672":        "amqp://u:p@127.0.0.1:5672",
		"/work/x/.artemis/instances/bgo-1": "/work/x/.artemis/instances/bgo-1",
		"a*b?[c]":                          `a\*b\?\[c\]`,
		"!{}^`|&;()<>\"\\":                 "\\!\\{\\}\\^\\`\\|\\&\\;\\(\\)\\<\\>\\\"\\\\",
		"amqp://a%40b:c%2Fd@127.0.0.1:1,x": "amqp://a%40b:c%2Fd@127.0.0.1:1\\,x",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestShq(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://u:p@127.0.0.1:1,amqp://u:p@127.0.0.1:2": "amqp://u:p@127.0.0.1:1,amqp://u:p@127.0.0.1:2",
		"a b": `a\ b`,
		"":    "",
	} {
		if got := shq(in); got != want {
			t.Errorf("shq(%q) = %s, want %s", in, got, want)
		}
	}
}

// The expected value is Python's urllib.parse.quote(s, safe="").
func TestURLEncode(t *testing.T) {
	if got, want := urlencode("p@ss w/rd:é~_.-+"), "p%40ss%20w%2Frd%3A%C3%A9~_.-%2B"; got != want {
		t.Errorf("urlencode = %s, want %s", got, want)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://babel:s3cret@127.0.0.1:5672":   "amqp://babel:***@127.0.0.1:5672",
		"amqp://127.0.0.1:5672":                "amqp://127.0.0.1:5672",
		"amqp://u:a:b@h:1,amqp://u:c@h:2":      "amqp://u:***@h:1,amqp://u:c@h:2",
		"amqp://u%3Ax:p%40w@127.0.0.1:1/vhost": "amqp://u%3Ax:***@127.0.0.1:1/vhost",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{"bgo1": true, "a.b_c-D": true, ".hidden": false, "a/b": false, "a b": false, "": false} {
		if ValidName(name) != want {
			t.Errorf("ValidName(%q) = %v", name, !want)
		}
	}
}

// The expected text is what the shell script's Python wrote for the same
// arguments.
func TestProduceXML(t *testing.T) {
	got, err := ProduceXML("order.created", `{"orderId":7,"t":"a]]>b & <c>"}`, "corr-7",
		[]string{"bq_origin=cli", `q=it's "x"`, "amp=a&b<c>"})
	if err != nil {
		t.Fatal(err)
	}
	want := `<?xml version="1.0"?>
<messages>
   <message type="text" priority="4">
      <properties>
         <property name="JMSType" value="order.created" type="simple-string"/>
         <property name="JMSCorrelationID" value="corr-7" type="simple-string"/>
         <property name="bq_origin" value="cli" type="simple-string"/>
         <property name="q" value="it's &quot;x&quot;" type="simple-string"/>
         <property name="amp" value="a&amp;b&lt;c&gt;" type="simple-string"/>
      </properties>
      <body>
         <![CDATA[{"orderId":7,"t":"a]]]]><![CDATA[>b & <c>"}]]>
      </body>
   </message>
</messages>
`
	if got != want {
		t.Errorf("ProduceXML:\n%s\nwant:\n%s", got, want)
	}
	if _, err := ProduceXML("t", "", "", nil); err == nil {
		t.Error("an empty body was accepted")
	}
	if _, err := ProduceXML("t", "b", "", []string{"novalue"}); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Errorf("a property without = : err = %v", err)
	}
	if got, want := quoteAttr(`say "hi"`), `'say "hi"'`; got != want {
		t.Errorf("quoteAttr = %s, want %s", got, want)
	}
}

// testCtl is a Ctl on a fresh root, with env, its stdout and stderr.
func testCtl(t *testing.T, env ...string) (*Ctl, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errb bytes.Buffer
	return New(t.TempDir(), env, &out, &errb), &out, &errb
}

// writeState creates an instance directory with a state file.
func writeState(t *testing.T, c *Ctl, name string, lines ...string) *Instance {
	t.Helper()
	i, err := c.Instance(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(i.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(i.state, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return i
}

func TestStateFile(t *testing.T) {
	c, _, _ := testCtl(t)
	i := writeState(t, c, "bgo-state", "AMQP_PORT=1", "CORE_PORT=2", "USER=u", "PASSWORD=p", "HA_ROLE=primary", "OTHER=x", "AMQP_PORT=3")
	if got := i.Get("AMQP_PORT"); got != "3" {
		t.Errorf("Get takes the last value: got %q", got)
	}
	if err := i.writeState("10", "20", "u2", "p2"); err != nil {
		t.Fatal(err)
	}
	if err := i.set("CLUSTER_SIZE", "3"); err != nil {
		t.Fatal(err)
	}
	if err := i.set("HA_ROLE", "backup"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(i.state)
	want := "AMQP_PORT=10\nCORE_PORT=20\nUSER=u2\nPASSWORD=p2\nCLUSTER_SIZE=3\nHA_ROLE=backup\n"
	if string(b) != want {
		t.Errorf("state file:\n%s\nwant:\n%s", b, want)
	}
}

func TestExportLinesSingle(t *testing.T) {
	c, _, _ := testCtl(t)
	i := writeState(t, c, "bgo-env", "AMQP_PORT=5999", "CORE_PORT=6999", "USER=b u", "PASSWORD=p@ss:w", "")
	want := "export ARTEMIS_URL=amqp://b%20u:p%40ss%3Aw@127.0.0.1:5999\n" +
		"export ARTEMIS_CORE_URL=tcp://127.0.0.1:6999\n" +
		"export ARTEMIS_USER=b\\ u\n" +
		"export ARTEMIS_PASSWORD=p@ss:w\n" +
		"export ARTEMIS_HOME=" + c.Dist + "\n" +
		"export ARTEMIS_INSTANCE_DIR=" + i.Dir + "\n"
	if got := i.Env(); got != want {
		t.Errorf("Env:\n%s\nwant:\n%s", got, want)
	}
}

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

func TestExportLinesCluster(t *testing.T) {
	c, out, _ := testCtl(t, "ARTEMIS_CLUSTER_NAME=bgocl")
	var dirs []string
	for k, ports := range [][2]int{{2001, 2002}, {2003, 2004}} {
		lines := []string{"AMQP_PORT=" + strconv.Itoa(ports[0]), "CORE_PORT=" + strconv.Itoa(ports[1]), "USER=babel", "PASSWORD=babel", "CLUSTER_SIZE=2"}
		if k == 0 {
			lines = append(lines, "CLUSTER_PEERS=2004", "CLUSTER_ROUTER_PORT=2005")
		} else {
			lines = append(lines, "CLUSTER_PEERS=2002")
		}
		dirs = append(dirs, writeState(t, c, "bgocl-"+strconv.Itoa(k+1), lines...).Dir)
	}
	if code := ExitCode(c.run([]string{"cluster-env"}, nil, false)); code != 0 {
		t.Fatalf("cluster-env exit %d", code)
	}
	want := "export ARTEMIS_CLUSTER_NAME=bgocl\n" +
		"export ARTEMIS_CLUSTER_URLS=\"amqp://babel:babel@127.0.0.1:2001 amqp://babel:babel@127.0.0.1:2003\"\n" +
		"export ARTEMIS_CLUSTER_ROUTER_URL=amqp://babel:babel@127.0.0.1:2005\n" +
		"export ARTEMIS_USER=babel\n" +
		"export ARTEMIS_PASSWORD=babel\n" +
		"export ARTEMIS_CLUSTER_1_CORE_URL=tcp://127.0.0.1:2002\n" +
		"export ARTEMIS_CLUSTER_1_DIR=" + dirs[0] + "\n" +
		"export ARTEMIS_CLUSTER_1_PID=\n" +
		"export ARTEMIS_CLUSTER_2_CORE_URL=tcp://127.0.0.1:2004\n" +
		"export ARTEMIS_CLUSTER_2_DIR=" + dirs[1] + "\n" +
		"export ARTEMIS_CLUSTER_2_PID=\n" +
		"export ARTEMIS_HOME=" + c.Dist + "\n"
	if out.String() != want {
		t.Errorf("cluster-env:\n%s\nwant:\n%s", out, want)
	}
	out.Reset()
	if code := ExitCode(c.run([]string{"cluster-status"}, nil, false)); code != 3 {
		t.Errorf("cluster-status of a stopped cluster: exit %d, want 3", code)
	}
	if !strings.HasPrefix(out.String(), "node 1: stopped, instance bgocl-1, pid -, AMQP 127.0.0.1:2001, CORE 127.0.0.1:2002, bridges connected -, router 127.0.0.1:2005\n") {
		t.Errorf("cluster-status:\n%s", out)
	}
}

// Commands that need no broker: their output and exit codes.
func TestCommandsWithoutABroker(t *testing.T) {
	for _, tc := range []struct {
		env          []string
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"status"}, 3, "stopped: instance bgo-none not created\n", ""},
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"env"}, 3, "", "artemis[bgo-none]: not running (use: scripts/artemis start)\n"},
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"stop"}, 0, "", "artemis[bgo-none]: no instance at "},
		{[]string{"ARTEMIS_INSTANCE=bgo-none"}, []string{"kill"}, 0, "", "artemis[bgo-none]: no instance at "},
		{[]string{"ARTEMIS_INSTANCE=bad/name"}, []string{"status"}, 2, "", "scripts/artemis: bad instance name 'bad/name' (use letters, digits, . _ -)\n"},
		{nil, []string{"bogus"}, 2, "", "Usage: scripts/artemis "},
		{nil, []string{}, 2, "", "Usage: scripts/artemis "},
		{nil, []string{"help"}, 0, "", "Usage: scripts/artemis "},
		{[]string{"ARTEMIS_HA_NAME=bgoha-none"}, []string{"ha-kill", "middle"}, 1, "", "artemis[ha:bgoha-none]: ERROR: the node is primary or backup, not 'middle'\n"},
		{[]string{"ARTEMIS_HA_NAME=bgoha-none"}, []string{"ha-env"}, 1, "", "artemis[ha:bgoha-none]: ERROR: the pair bgoha-none is not created (use: scripts/artemis ha-start)\n"},
		{[]string{"ARTEMIS_CLUSTER_NAME=bgocl-none"}, []string{"cluster-kill", "2"}, 1, "", "artemis[cluster:bgocl-none]: ERROR: the cluster bgocl-none is not created (use: scripts/artemis cluster-start)\n"},
		{[]string{"ARTEMIS_CLUSTER_NAME=bgocl-none"}, []string{"cluster-status"}, 3, "stopped: cluster bgocl-none not created\n", ""},
		{[]string{"ARTEMIS_URL=amqp://me:secret@broker.example:5672"}, []string{"start"}, 0, "export ARTEMIS_URL=amqp://me:secret@broker.example:5672\n",
			"artemis[default]: ARTEMIS_URL is set: using that broker (amqp://me:***@broker.example:5672), not starting a local one\n"},
	} {
		c, out, errb := testCtl(t, tc.env...)
		code := ExitCode(c.run(tc.args, nil, false))
		if code != tc.code || out.String() != tc.stdout || !strings.HasPrefix(errb.String(), tc.errs) || (tc.errs == "" && errb.Len() > 0) {
			t.Errorf("%v %v: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr starting %q",
				tc.env, tc.args, code, out, errb, tc.code, tc.stdout, tc.errs)
		}
	}
}

func TestClusterIndex(t *testing.T) {
	c, _, errb := testCtl(t)
	cl := c.Cluster("bgocl")
	writeState(t, c, "bgocl-1", "AMQP_PORT=1", "CORE_PORT=2", "USER=u", "PASSWORD=p", "CLUSTER_SIZE=3")
	for arg, ok := range map[string]bool{"1": true, "3": true, "0": false, "4": false, "+2": false, "x": false, "": false} {
		_, err := cl.checkIndex(arg)
		if (err == nil) != ok {
			t.Errorf("checkIndex(%q): err = %v", arg, err)
		}
	}
	if !strings.Contains(errb.String(), "the node is 1 to 3, not 'x'") {
		t.Errorf("stderr: %s", errb)
	}
}

// listen holds a loopback port for the test.
func listen(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func TestPickPort(t *testing.T) {
	taken := listen(t)
	n, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	free := strconv.Itoa(n)

	for _, tc := range []struct {
		name, anyPort, explicit, last, def string
		avoid                              []string
		want                               string // "" = error; "new" = any other port
		errs                               string
	}{
		{"explicit free", "0", free, taken, "5672", nil, free, ""},
		{"explicit taken", "1", taken, "", "5672", nil, "", "AMQP port 127.0.0.1:" + taken + " (ARTEMIS_AMQP_PORT) is in use"},
		{"explicit avoided", "1", free, "", "5672", []string{free}, "", "(ARTEMIS_AMQP_PORT) is in use"},
		{"last free", "0", "", free, "5672", nil, free, ""},
		{"default free", "0", "", "", free, nil, free, ""},
		{"last taken, strict", "0", "", taken, "5672", nil, "", "AMQP port 127.0.0.1:" + taken + " (the port this instance used last) is taken"},
		{"default taken, strict", "", "", "", taken, nil, "", "(the default) is taken"},
		{"avoided, strict", "0", "", free, "5672", []string{free}, "", "taken by this instance's other acceptor"},
		{"last taken, any port", "1", "", taken, "5672", nil, "new", "AMQP port " + taken + " is taken; ARTEMIS_ANY_PORT=1: using free port "},
		{"fresh", "fresh", "", free, "5672", nil, "new", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, errb := testCtl(t)
			i, _ := c.Instance("bgo-ports")
			i.anyPort = tc.anyPort
			got, err := i.pickPort("AMQP", tc.explicit, tc.last, tc.def, tc.avoid)
			switch tc.want {
			case "":
				if err == nil || ExitCode(err) != 1 {
					t.Fatalf("got %s, %v; want exit 1", got, err)
				}
			case "new":
				if err != nil || got == taken || got == "" {
					t.Fatalf("got %s, %v; want another free port", got, err)
				}
				if !portBindable(got) {
					t.Errorf("port %s is not free", got)
				}
			default:
				if err != nil || got != tc.want {
					t.Fatalf("got %s, %v; want %s", got, err, tc.want)
				}
			}
			if !strings.Contains(errb.String(), tc.errs) || (tc.errs == "" && errb.Len() > 0) {
				t.Errorf("stderr %q, want it to contain %q", errb, tc.errs)
			}
		})
	}
}

func TestFreePorts(t *testing.T) {
	ps, err := freePorts(7)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] || p <= 0 {
			t.Fatalf("ports %v: not 7 distinct ports", ps)
		}
		seen[p] = true
	}
}

func TestLogPaths(t *testing.T) {
	c, out, _ := testCtl(t, "ARTEMIS_HA_NAME=bgoha", "ARTEMIS_INSTANCE=bgo1")
	if code := ExitCode(c.run([]string{"log"}, nil, false)); code != 0 {
		t.Fatal(code)
	}
	if code := ExitCode(c.run([]string{"ha-log", "backup"}, nil, false)); code != 0 {
		t.Fatal(code)
	}
	want := filepath.Join(c.Base, "instances", "bgo1", "log", "artemis.log") + "\n" +
		filepath.Join(c.Base, "instances", "bgoha-backup", "log", "artemis.log") + "\n"
	if out.String() != want {
		t.Errorf("log paths:\n%s\nwant:\n%s", out, want)
	}
}
