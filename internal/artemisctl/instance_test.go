package artemisctl

import (
	"os"
	"testing"
)

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
