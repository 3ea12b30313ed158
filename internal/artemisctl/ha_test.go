package artemisctl

import "testing"

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
