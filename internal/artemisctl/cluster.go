package artemisctl

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

func removeAll(dir string) error { return os.RemoveAll(dir) }

// Cluster is N live nodes <Name>-1 .. <Name>-N on loopback, each on two
// ports chosen at creation and kept; node 1 also has the router port.
type Cluster struct {
	c    *Ctl
	Name string
}

// Cluster returns the cluster name (ARTEMIS_CLUSTER_NAME, default
// "cluster").
func (c *Ctl) Cluster(name string) *Cluster {
	if name == "" {
		name = "cluster"
	}
	return &Cluster{c: c, Name: name}
}

func (cl *Cluster) logName() string { return "cluster:" + cl.Name }

// Node returns node i (1-based), without checking i.
func (cl *Cluster) Node(i int) (*Instance, error) { return cl.c.node(cl.Name + "-" + strconv.Itoa(i)) }

// Size is the size of the created cluster (0: none).
func (cl *Cluster) Size() int {
	n1, err := cl.Node(1)
	if err != nil {
		return 0
	}
	return n1.getInt("CLUSTER_SIZE")
}

// checkIndex fails unless arg names a node of the created cluster.
func (cl *Cluster) checkIndex(arg string) (int, error) {
	n := cl.Size()
	if n <= 0 {
		return 0, cl.c.die(cl.logName(), "the cluster %s is not created (use: scripts/artemis cluster-start)", cl.Name)
	}
	i, err := strconv.Atoi(arg)
	if err != nil || i < 1 || i > n || strings.TrimLeft(arg, "0123456789") != "" {
		return 0, cl.c.die(cl.logName(), "the node is 1 to %d, not '%s'", n, arg)
	}
	return i, nil
}

// create makes the n instances on first use, on 2n+1 fresh free ports.
func (cl *Cluster) create(n int) error {
	if have := cl.Size(); have > 0 {
		if have != n {
			return cl.c.die(cl.logName(), "the cluster %s has %d nodes, not %d: cluster-reset first", cl.Name, have, n)
		}
		return nil
	}
	if n < 2 || n > 9 {
		return cl.c.die(cl.logName(), "a cluster has 2 to 9 nodes, not '%d'", n)
	}
	ports, err := freePorts(2*n + 1)
	if err != nil {
		return cl.c.die(cl.logName(), "no free ports: %v", err)
	}
	var pairs strings.Builder
	for k := 0; k < n; k++ {
		fmt.Fprintf(&pairs, "%d/%d ", ports[2*k], ports[2*k+1])
	}
	cl.c.logf(cl.logName(), "creating the cluster %s of %d nodes (AMQP/CORE ports: %srouter %d)", cl.Name, n, pairs.String(), ports[2*n])
	for k := 1; k <= n; k++ {
		var peers []string
		for j := 1; j <= n; j++ {
			if j != k {
				peers = append(peers, strconv.Itoa(ports[2*j-1]))
			}
		}
		kv := map[string]string{"CLUSTER_SIZE": strconv.Itoa(n), "CLUSTER_PEERS": strings.Join(peers, " ")}
		if k == 1 {
			kv["CLUSTER_ROUTER_PORT"] = strconv.Itoa(ports[2*n])
		}
		node, err := cl.Node(k)
		if err != nil {
			return err
		}
		if err := initNode(node, "instance-"+node.Name, ports[2*k-2], ports[2*k-1], kv, "cluster-reset"); err != nil {
			return err
		}
	}
	return nil
}

var reBridge = regexp.MustCompile(`AMQ221027: Bridge ClusterConnectionBridge@[0-9a-f]+`)

// bridges counts the distinct cluster bridges of the node's current run
// that are connected (AMQ221027 lines in its console log).
func bridges(i *Instance) int {
	seen := map[string]bool{}
	for _, m := range reBridge.FindAllString(i.consoleText(), -1) {
		seen[m] = true
	}
	return len(seen)
}

// bridgeLines counts the AMQ221027 lines of the node's console log.
func bridgeLines(i *Instance) int {
	n := 0
	for _, l := range strings.Split(i.consoleText(), "\n") {
		if strings.Contains(l, "AMQ221027: Bridge ClusterConnectionBridge") {
			n++
		}
	}
	return n
}

// clusterNodeState is "running", "starting" (no AMQP acceptor yet) or
// "stopped".
func clusterNodeState(i *Instance) string {
	if !i.running() {
		return "stopped"
	}
	if portOpen(i.Get("AMQP_PORT")) {
		return "running"
	}
	return "starting"
}

func (cl *Cluster) nodes(n int) []*Instance {
	out := make([]*Instance, n+1) // 1-based
	for k := 1; k <= n; k++ {
		out[k], _ = cl.Node(k)
	}
	return out
}

// waitConnected waits until every running node has a connected bridge to
// every other running node.
func (cl *Cluster) waitConnected(n int) error {
	t0 := time.Now()
	deadline := t0.Add(cl.c.StartTimeout)
	nodes := cl.nodes(n)
	for {
		up := 0
		states := make([]string, n+1)
		for k := 1; k <= n; k++ {
			states[k] = clusterNodeState(nodes[k])
			if states[k] == "running" {
				up++
			}
		}
		want, ok, have := up-1, true, ""
		for k := 1; k <= n; k++ {
			if states[k] != "running" {
				continue
			}
			b := bridges(nodes[k])
			have += fmt.Sprintf(" %d:%d", k, b)
			if b < want {
				ok = false
			}
		}
		if ok {
			cl.c.logf(cl.logName(), "cluster %s: %d of %d nodes running, each connected to the %d others (%d s)", cl.Name, up, n, want, int(time.Since(t0)/time.Second))
			return nil
		}
		if time.Now().After(deadline) {
			return cl.c.die(cl.logName(), "the cluster did not connect within %d s (bridges per node:%s, want %d)", int(cl.c.StartTimeout/time.Second), have, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitRejoined waits until every other running node has logged a bridge
// connection since its count was before[k]: its bridge to node is up.
func (cl *Cluster) waitRejoined(n, node int, before []int) error {
	deadline := time.Now().Add(cl.c.StartTimeout)
	nodes := cl.nodes(n)
	for {
		ok := true
		for k := 1; k <= n; k++ {
			if k == node || clusterNodeState(nodes[k]) != "running" {
				continue
			}
			if bridgeLines(nodes[k]) <= before[k] {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return cl.c.die(cl.logName(), "the other nodes did not connect to node %d within %d s", node, int(cl.c.StartTimeout/time.Second))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// Env returns the cluster's export lines.
func (cl *Cluster) Env() (string, error) {
	n := cl.Size()
	if n <= 0 {
		return "", cl.c.die(cl.logName(), "the cluster %s is not created (use: scripts/artemis cluster-start)", cl.Name)
	}
	nodes := cl.nodes(n)
	var urls []string
	for k := 1; k <= n; k++ {
		urls = append(urls, nodes[k].URL())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "export ARTEMIS_CLUSTER_NAME=%s\n", shellQuote(cl.Name))
	fmt.Fprintf(&b, "export ARTEMIS_CLUSTER_URLS=\"%s\"\n", strings.Join(urls, " "))
	n1 := nodes[1]
	if rp := n1.Get("CLUSTER_ROUTER_PORT"); rp != "" {
		fmt.Fprintf(&b, "export ARTEMIS_CLUSTER_ROUTER_URL=%s\n",
			shq("amqp://"+urlencode(n1.Get("USER"))+":"+urlencode(n1.Get("PASSWORD"))+"@127.0.0.1:"+rp))
	}
	fmt.Fprintf(&b, "export ARTEMIS_USER=%s\n", shellQuote(n1.Get("USER")))
	fmt.Fprintf(&b, "export ARTEMIS_PASSWORD=%s\n", shellQuote(n1.Get("PASSWORD")))
	for k := 1; k <= n; k++ {
		pid := ""
		if p, ok := nodes[k].Pid(); ok {
			pid = strconv.Itoa(p)
		}
		fmt.Fprintf(&b, "export ARTEMIS_CLUSTER_%d_CORE_URL=%s\n", k, nodes[k].CoreURL())
		fmt.Fprintf(&b, "export ARTEMIS_CLUSTER_%d_DIR=%s\n", k, shellQuote(nodes[k].Dir))
		fmt.Fprintf(&b, "export ARTEMIS_CLUSTER_%d_PID=%s\n", k, pid)
	}
	fmt.Fprintf(&b, "export ARTEMIS_HOME=%s\n", shellQuote(cl.c.Dist))
	return b.String(), nil
}

// Start creates the cluster on first use (n nodes; 0: the created size,
// else 3), starts every node at once and waits until each node's bridges to
// all the others are connected (AMQ221027).
func (cl *Cluster) Start(n int) error {
	if n <= 0 {
		n = cl.Size()
	}
	if n <= 0 {
		n = 3
	}
	if err := cl.c.need(cl.logName(), "java", "a Java runtime, 17 or newer", "openjdk-17-jre-headless"); err != nil {
		return err
	}
	if err := cl.c.need(cl.logName(), "mvn", "Apache Maven", "maven"); err != nil {
		return err
	}
	if err := cl.c.EnsureDist(cl.logName()); err != nil {
		return err
	}
	if err := cl.create(n); err != nil {
		return err
	}
	nodes := cl.nodes(n)
	if anyFails(n, func(k int) error { return nodes[k].StartNode() }) {
		return cl.c.die(cl.logName(), "a node did not start (see above)")
	}
	return cl.waitConnected(n)
}

// Status returns one line per node; ok is false when one is not running.
func (cl *Cluster) Status() (string, bool) {
	n := cl.Size()
	if n <= 0 {
		return fmt.Sprintf("stopped: cluster %s not created\n", cl.Name), false
	}
	var b strings.Builder
	ok := true
	for k, node := range cl.nodes(n)[1:] {
		st := clusterNodeState(node)
		if st != "running" {
			ok = false
		}
		pid := "-"
		if p, running := node.Pid(); running {
			pid = strconv.Itoa(p)
		}
		br := "-"
		if st != "stopped" {
			br = strconv.Itoa(bridges(node))
		}
		router := ""
		if rp := node.Get("CLUSTER_ROUTER_PORT"); rp != "" {
			router = ", router 127.0.0.1:" + rp
		}
		fmt.Fprintf(&b, "node %d: %s, instance %s, pid %s, AMQP 127.0.0.1:%s, CORE 127.0.0.1:%s, bridges connected %s%s\n",
			k+1, st, node.Name, pid, node.Get("AMQP_PORT"), node.Get("CORE_PORT"), br, router)
	}
	return b.String(), ok
}

// Kill SIGKILLs node arg (1-based) and returns the moment of the signal
// (the zero time when it was not running).
func (cl *Cluster) Kill(arg string) (time.Time, error) {
	k, err := cl.checkIndex(arg)
	if err != nil {
		return time.Time{}, err
	}
	node, _ := cl.Node(k)
	t0, err := node.Kill()
	if err != nil {
		return t0, err
	}
	if t0.IsZero() {
		cl.c.logf(cl.logName(), "node %d was not running", k)
		return t0, nil
	}
	cl.c.printf("export ARTEMIS_CLUSTER_KILLED_AT_MS=%d\n", t0.UnixMilli())
	return t0, nil
}

// Restart starts node arg again and returns once it is up and every running
// node's bridge to it is connected again. running is true when it ran
// already (nothing done).
func (cl *Cluster) Restart(arg string) (running bool, err error) {
	k, err := cl.checkIndex(arg)
	if err != nil {
		return false, err
	}
	n := cl.Size()
	t0 := nowMS()
	nodes := cl.nodes(n)
	if clusterNodeState(nodes[k]) != "stopped" {
		cl.c.logf(cl.logName(), "node %d is running already", k)
		return true, nil
	}
	// The others' bridge lines so far: each running node logs a new
	// AMQ221027 once its bridge to the restarted node is connected again.
	before := make([]int, n+1)
	for j := 1; j <= n; j++ {
		before[j] = bridgeLines(nodes[j])
	}
	if err := nodes[k].StartNode(); err != nil {
		return false, err
	}
	if err := cl.waitConnected(n); err != nil {
		return false, err
	}
	if err := cl.waitRejoined(n, k, before); err != nil {
		return false, err
	}
	cl.c.logf(cl.logName(), "node %d active and connected %d ms after its restart", k, nowMS()-t0)
	return false, nil
}

// Stop stops every node at once.
func (cl *Cluster) Stop() error {
	n := cl.Size()
	nodes := cl.nodes(n)
	if anyFails(n, func(k int) error { return nodes[k].Stop() }) {
		return &ExitError{Code: 1, Msg: "a node did not stop"}
	}
	return nil
}

// anyFails runs fn for nodes 1 to n at once, waits for them all, and says
// whether one of them failed.
func anyFails(n int, fn func(k int) error) bool {
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for k := 1; k <= n; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			errs[k] = fn(k)
		}(k)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return true
		}
	}
	return false
}

// Reset stops and deletes every node.
func (cl *Cluster) Reset() error {
	n := cl.Size()
	for k := 1; k <= n; k++ {
		node, _ := cl.Node(k)
		if err := node.Reset(); err != nil {
			return err
		}
	}
	return nil
}
