package brokertest

import (
	"testing"
)

func TestClusterFromEnvReadsOneNodePerURL(t *testing.T) {
	t.Setenv(EnvClusterURLs, "")
	if _, ok := ClusterFromEnv(); ok {
		t.Fatal("no URLs: no cluster")
	}
	t.Setenv(EnvClusterURLs, "amqp://u:p@127.0.0.1:1  amqp://u:p@127.0.0.1:2")
	t.Setenv(EnvClusterName, "c")
	t.Setenv(EnvClusterRouterURL, "amqp://u:p@127.0.0.1:9")
	t.Setenv("ARTEMIS_CLUSTER_2_DIR", "/tmp/node2")
	t.Setenv("ARTEMIS_CLUSTER_2_CORE_URL", "tcp://127.0.0.1:22")
	c, ok := ClusterFromEnv()
	if !ok {
		t.Fatal("not read")
	}
	if c.Name != "c" || c.RouterURL != "amqp://u:p@127.0.0.1:9" || len(c.Nodes) != 2 {
		t.Fatalf("got %+v", c)
	}
	if c.Nodes[1].InstanceDir != "/tmp/node2" || c.Nodes[1].CoreURL != "tcp://127.0.0.1:22" || c.Nodes[0].InstanceDir != "" {
		t.Fatalf("node settings: %+v %+v", c.Nodes[0], c.Nodes[1])
	}
	if got := c.URLs(); len(got) != 2 || got[1] != "amqp://u:p@127.0.0.1:2" {
		t.Fatalf("URLs: %v", got)
	}
	m := c.Members()
	if len(m) != 2 || len(m[0]) != 1 || m[0][0] != "amqp://u:p@127.0.0.1:1" {
		t.Fatalf("Members: %v", m)
	}
}
