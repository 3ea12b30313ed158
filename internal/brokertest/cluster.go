package brokertest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The environment variables `scripts/artemis cluster-start` (and
// cluster-env) print for a cluster of live nodes.
const (
	EnvClusterName       = "ARTEMIS_CLUSTER_NAME"
	EnvClusterURLs       = "ARTEMIS_CLUSTER_URLS"       // one AMQP URL per node, space-separated
	EnvClusterRouterURL  = "ARTEMIS_CLUSTER_ROUTER_URL" // node 1's redirecting acceptor
	clusterScriptTimeout = 3 * time.Minute              // one cluster-kill / cluster-restart, on a loaded machine
)

// Cluster is a running Artemis cluster that `scripts/artemis cluster-start`
// started, as the environment describes it. Its methods SIGKILL and
// restart a node (with package artemisctl, else through the script).
type Cluster struct {
	Name      string
	Nodes     []*Broker // node I (1-based) is Nodes[I-1]
	RouterURL string    // "" when the cluster has no connection router
	script    string
}

// ClusterFromEnv reads the cluster's settings. ok is false when
// ARTEMIS_CLUSTER_URLS is not set.
func ClusterFromEnv() (c *Cluster, ok bool) {
	urls := strings.Fields(os.Getenv(EnvClusterURLs))
	if len(urls) == 0 {
		return nil, false
	}
	c = &Cluster{Name: os.Getenv(EnvClusterName), RouterURL: os.Getenv(EnvClusterRouterURL), script: scriptName()}
	for i, u := range urls {
		c.Nodes = append(c.Nodes, &Broker{
			URL:         u,
			CoreURL:     os.Getenv(fmt.Sprintf("ARTEMIS_CLUSTER_%d_CORE_URL", i+1)),
			Home:        os.Getenv(EnvHome),
			InstanceDir: os.Getenv(fmt.Sprintf("ARTEMIS_CLUSTER_%d_DIR", i+1)),
			User:        os.Getenv(EnvUser),
			Password:    os.Getenv(EnvPassword),
		})
	}
	return c, true
}

// RequireCluster returns the cluster, or skips the test when
// ARTEMIS_CLUSTER_URLS is not set. The environment must name the cluster.
func RequireCluster(t testing.TB) *Cluster {
	t.Helper()
	c, ok := ClusterFromEnv()
	if !ok {
		t.Skip("cluster test skipped: ARTEMIS_CLUSTER_URLS is not set; run scripts/test, or " +
			`eval "$(ARTEMIS_CLUSTER_NAME=mine scripts/artemis cluster-start)" and export ARTEMIS_SCRIPT`)
	}
	if c.Name == "" || len(c.Nodes) < 2 {
		t.Fatalf("%s is set but %s is not, or it names fewer than 2 nodes: eval all of `scripts/artemis cluster-env`",
			EnvClusterURLs, EnvClusterName)
	}
	return c
}

// URLs returns the nodes' URLs, node 1 first.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.URL
	}
	return out
}

// Members returns the nodes as DialCluster takes them: one URL list per
// member (each node is a live node without a backup).
func (c *Cluster) Members() [][]string {
	out := make([][]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = []string{n.URL}
	}
	return out
}

// KillNode SIGKILLs node i (1-based) and returns the moment of the signal.
func (c *Cluster) KillNode(t testing.TB, i int) time.Time {
	t.Helper()
	if root := c.root(i); root != "" {
		ctl, done := directCtl(t, root, "cluster-kill "+strconv.Itoa(i), EnvClusterName+"="+c.Name)
		at, err := ctl.Cluster(c.Name).Kill(strconv.Itoa(i))
		done(err)
		if at.IsZero() {
			t.Fatalf("cluster-kill %d: the node was not running", i)
		}
		return at
	}
	out := c.Run(t, "cluster-kill", strconv.Itoa(i))
	if v, ok := strings.CutPrefix(strings.TrimSpace(out), "export ARTEMIS_CLUSTER_KILLED_AT_MS="); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.UnixMilli(ms)
		}
	}
	t.Fatalf("cluster-kill %d printed %q, not the moment of the kill: was the node running?", i, out)
	return time.Time{}
}

// RestartNode starts node i (1-based) again. It returns once its
// AMQP acceptor is up and every running node's bridge to it is connected
// again. It returns how long that took.
func (c *Cluster) RestartNode(t testing.TB, i int) time.Duration {
	t.Helper()
	start := time.Now()
	if root := c.root(i); root != "" {
		ctl, done := directCtl(t, root, "cluster-restart "+strconv.Itoa(i), EnvClusterName+"="+c.Name)
		_, err := ctl.Cluster(c.Name).Restart(strconv.Itoa(i))
		done(err)
	} else {
		c.Run(t, "cluster-restart", strconv.Itoa(i))
	}
	return time.Since(start)
}

// root is the repository whose scripts/artemis made the cluster ("" when
// the environment does not name node i's directory): the cluster is then
// managed with package artemisctl directly, not through the script.
func (c *Cluster) root(i int) string {
	if i < 1 || i > len(c.Nodes) {
		return ""
	}
	return ctlRoot(c.Nodes[i-1].InstanceDir, c.Name+"-"+strconv.Itoa(i))
}

// Status returns `scripts/artemis cluster-status`: one line per node.
func (c *Cluster) Status(t testing.TB) string {
	t.Helper()
	return c.Run(t, "cluster-status")
}

// Run runs the script for this cluster (ARTEMIS_CLUSTER_NAME set to its
// name) and returns its stdout, failing the test when the script fails; it
// logs stderr. cluster-status exiting 3 (a node is stopped) is an answer,
// not a failure.
func (c *Cluster) Run(t testing.TB, args ...string) string {
	t.Helper()
	return runNamed(t, c.script, EnvClusterName+"="+c.Name, clusterScriptTimeout, "cluster-status", args...)
}
