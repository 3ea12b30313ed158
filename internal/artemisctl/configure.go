package artemisctl

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Writing an instance's configuration files.

// configure rewrites etc/broker.xml (and the users, roles and heap) for the
// ports amqp and core; a pair's or a cluster's node gets its settings too.
func (i *Instance) configure(amqp, core, tls int) error {
	fsync := i.c.getenv("ARTEMIS_FSYNC") == "true"
	path := filepath.Join(i.Dir, "etc", "broker.xml")
	b, err := os.ReadFile(path)
	if err != nil {
		return i.die("%v", err)
	}
	orig := string(b)
	xml, err := ConfigureBase(orig, amqp, core, fsync)
	if err != nil {
		return i.die("%v", err)
	}
	if tls != 0 {
		if xml, err = ConfigureTLS(xml, i.tlsAcceptor(tls)); err != nil {
			return i.die("%v", err)
		}
	}
	if role := i.Get("HA_ROLE"); role != "" {
		peer := i.getInt("HA_PEER_CORE")
		if peer == 0 {
			return i.die("HA node %s has no peer port in %s (recreate the pair: ha-reset)", i.Name, i.state)
		}
		locks := i.c.haLocks(strings.TrimSuffix(i.Name, "-"+role))
		if err := os.MkdirAll(locks, 0o755); err != nil {
			return i.die("%v", err)
		}
		if xml, err = ConfigureHA(xml, core, role, peer, i.Get("USER"), i.Get("PASSWORD"), locks); err != nil {
			return i.die("%v", err)
		}
	}
	if peers := i.Get("CLUSTER_PEERS"); peers != "" {
		var ps []int
		for _, f := range strings.Fields(peers) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return i.die("bad CLUSTER_PEERS in %s: %q", i.state, peers)
			}
			ps = append(ps, n)
		}
		if xml, err = ConfigureCluster(xml, core, ps, i.getInt("CLUSTER_ROUTER_PORT"), i.Get("USER"), i.Get("PASSWORD")); err != nil {
			return i.die("%v", err)
		}
	}
	if xml != orig {
		if err := writeFileAtomic(path, xml); err != nil {
			return i.die("%v", err)
		}
	}
	// The second login, nodlq/nodlq-pw (role nodlq), in plain text: the
	// properties login module takes a value that is not ENC(...) as the
	// password itself.
	for _, f := range [][2]string{{"artemis-users.properties", "nodlq = nodlq-pw"}, {"artemis-roles.properties", "nodlq = nodlq"}} {
		p := filepath.Join(i.Dir, "etc", f[0])
		b, err := os.ReadFile(p)
		if err != nil {
			return i.die("%v", err)
		}
		if out, changed := AddNodlq(string(b), f[1]); changed {
			if err := writeFileAtomic(p, out); err != nil {
				return i.die("%v", err)
			}
		}
	}
	xms, xmx := i.c.getenv("ARTEMIS_JAVA_XMS"), i.c.getenv("ARTEMIS_JAVA_XMX")
	if xms == "" {
		xms = "256m"
	}
	if xmx == "" {
		xmx = "1g"
	}
	if !reHeapSize.MatchString(xms) {
		return i.die("ARTEMIS_JAVA_XMS=%s is not a heap size like 256m", xms)
	}
	if !reHeapSize.MatchString(xmx) {
		return i.die("ARTEMIS_JAVA_XMX=%s is not a heap size like 1g", xmx)
	}
	p := filepath.Join(i.Dir, "etc", "artemis.profile")
	b, err = os.ReadFile(p)
	if err != nil {
		return i.die("%v", err)
	}
	if out := SetHeap(string(b), xms, xmx); out != string(b) {
		if err := writeFileAtomic(p, out); err != nil {
			return i.die("%v", err)
		}
	}
	return nil
}

func writeFileAtomic(path, text string) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
