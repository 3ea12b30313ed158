package artemisctl

import (
	"strconv"
	"strings"
	"testing"
)

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
