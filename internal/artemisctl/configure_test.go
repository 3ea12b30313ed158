package artemisctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// newInstanceDir makes an instance directory as `artemis create` leaves
// it (the files configure edits) with the state lines.
func newInstanceDir(t *testing.T, c *Ctl, name string, state ...string) *Instance {
	t.Helper()
	i := writeState(t, c, name, state...)
	etc := filepath.Join(i.Dir, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, text := range map[string]string{
		"broker.xml":               readTestdata(t, "created-broker.xml"),
		"artemis.profile":          readTestdata(t, "created-artemis.profile"),
		"artemis-users.properties": "babel = ENC(not-a-real-hash)",
		"artemis-roles.properties": "amq = babel\n",
	} {
		if err := os.WriteFile(filepath.Join(etc, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return i
}

func readEtc(t *testing.T, i *Instance, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(i.Dir, "etc", file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConfigureInstanceFiles(t *testing.T) {
	c, _, _ := testCtl(t)
	i := newInstanceDir(t, c, "bgoha-primary", "AMQP_PORT=20001", "CORE_PORT=20002", "USER=babel", "PASSWORD=babel", "HA_ROLE=primary", "HA_PEER_CORE=20004")
	if err := i.configure(20001, 20002, 0); err != nil {
		t.Fatal(err)
	}
	// The lock folder is below the Ctl's base, a temporary folder here.
	checkGolden(t, "ha-primary.golden.xml", strings.ReplaceAll(readEtc(t, i, "broker.xml"), c.Base, "/x/.artemis"))
	if err := i.configure(20001, 20002, 0); err != nil { // a second start
		t.Fatal(err)
	}
	checkGolden(t, "ha-primary.restart.golden.xml", strings.ReplaceAll(readEtc(t, i, "broker.xml"), c.Base, "/x/.artemis"))
	if st, err := os.Stat(filepath.Join(c.Base, "ha-locks", "bgoha")); err != nil || !st.IsDir() {
		t.Errorf("the pair's lock folder was not made: %v", err)
	}
	if got, want := readEtc(t, i, "artemis-users.properties"), "babel = ENC(not-a-real-hash)\nnodlq = nodlq-pw\n"; got != want {
		t.Errorf("users:\n%s\nwant:\n%s", got, want)
	}
	if got, want := readEtc(t, i, "artemis-roles.properties"), "amq = babel\nnodlq = nodlq\n"; got != want {
		t.Errorf("roles:\n%s\nwant:\n%s", got, want)
	}
	if p := readEtc(t, i, "artemis.profile"); !strings.Contains(p, " -Xms256m -Xmx1g ") {
		t.Errorf("the profile does not have the default heap -Xms256m -Xmx1g")
	}
}

func TestConfigureRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		env   []string
		state []string
		errs  string
	}{
		{[]string{"ARTEMIS_JAVA_XMS=lots"}, nil, "ARTEMIS_JAVA_XMS=lots is not a heap size like 256m"},
		{[]string{"ARTEMIS_JAVA_XMX=1t"}, nil, "ARTEMIS_JAVA_XMX=1t is not a heap size like 1g"},
		{nil, []string{"HA_ROLE=backup"}, "has no peer port"},
		{nil, []string{"CLUSTER_PEERS=1 x"}, "bad CLUSTER_PEERS"},
	} {
		c, _, errb := testCtl(t, tc.env...)
		i := newInstanceDir(t, c, "bgo-bad", append([]string{"USER=u", "PASSWORD=p"}, tc.state...)...)
		err := i.configure(1, 2, 0)
		if ExitCode(err) != 1 || !strings.Contains(errb.String(), tc.errs) {
			t.Errorf("%v %v: err %v, stderr %q; want exit 1 and %q", tc.env, tc.state, err, errb, tc.errs)
		}
	}
}
