package artemisctl

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The golden files are what the broker set-up wrote before it was written
// in Go (the Python edits of the shell script, applied to
// testdata/created-broker.xml, the file `artemis create` writes): the Go
// edits must give the same bytes.
var update = flag.Bool("update", false, "rewrite the golden files from the Go edits")

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := readTestdata(t, name)
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s differs from the golden file at line %d:\n got: %q\nwant: %q", name, i+1, g, w)
		}
	}
	t.Fatalf("%s differs from the golden file", name)
}

// render applies f to the created broker.xml (the first start), checks
// the result against the golden file name, and applies f again (a later
// start): that must give the golden file restart (the first pass leaves
// blank lines that the second removes, as the Python edits did), and a
// third pass must change nothing.
func render(t *testing.T, name, restart string, f func(string) (string, error)) string {
	t.Helper()
	once, err := f(readTestdata(t, "created-broker.xml"))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, name, once)
	twice, err := f(once)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, restart, twice)
	thrice, err := f(twice)
	if err != nil {
		t.Fatal(err)
	}
	if thrice != twice {
		t.Fatal("a third pass over broker.xml changed it: the edits do not settle")
	}
	return once
}

func TestConfigureSingle(t *testing.T) {
	got := render(t, "single.golden.xml", "single.golden.xml", func(x string) (string, error) { return ConfigureBase(x, 5672, 61616, false) })
	for _, want := range []string{
		`<acceptor name="amqp">tcp://127.0.0.1:5672?`,
		`<acceptor name="artemis">tcp://127.0.0.1:61616?`,
		`<journal-datasync>false</journal-datasync>`,
		`<security-setting match="*.*.*.*.*.*.dlq">`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("broker.xml lacks %s", want)
		}
	}
}

func TestConfigureSingleFsync(t *testing.T) {
	got := render(t, "single-fsync.golden.xml", "single-fsync.golden.xml", func(x string) (string, error) { return ConfigureBase(x, 5672, 61616, true) })
	if !strings.Contains(got, "<journal-buffer-timeout>1000000</journal-buffer-timeout>") {
		t.Error("fsync: the journal buffer timeout is not 1000000")
	}
}

func TestConfigureHA(t *testing.T) {
	for _, tc := range []struct {
		role             string
		amqp, core, peer int
	}{
		{"primary", 20001, 20002, 20004},
		{"backup", 20003, 20004, 20002},
	} {
		t.Run(tc.role, func(t *testing.T) {
			render(t, "ha-"+tc.role+".golden.xml", "ha-"+tc.role+".restart.golden.xml", func(x string) (string, error) {
				x, err := ConfigureBase(x, tc.amqp, tc.core, false)
				if err != nil {
					return "", err
				}
				return ConfigureHA(x, tc.core, tc.role, tc.peer, "babel", "babel", "/x/.artemis/ha-locks/bgoha")
			})
		})
	}
}

func TestConfigureCluster(t *testing.T) {
	t.Run("router node", func(t *testing.T) {
		got := render(t, "cluster-1.golden.xml", "cluster-1.restart.golden.xml", func(x string) (string, error) {
			x, err := ConfigureBase(x, 30001, 30002, false)
			if err != nil {
				return "", err
			}
			return ConfigureCluster(x, 30002, []int{30004, 30006}, 30007, `u&<s>`, `p&w<>"`)
		})
		if !strings.Contains(got, "<password>p&amp;w&lt;&gt;\"</password>") {
			t.Error("the router pool's password is not escaped")
		}
	})
	t.Run("node", func(t *testing.T) {
		got := render(t, "cluster-2.golden.xml", "cluster-2.restart.golden.xml", func(x string) (string, error) {
			x, err := ConfigureBase(x, 30003, 30004, false)
			if err != nil {
				return "", err
			}
			return ConfigureCluster(x, 30004, []int{30002, 30006}, 0, "babel", "babel")
		})
		if strings.Contains(got, "router") {
			t.Error("a node without a router port has router settings")
		}
	})
}

func TestConfigureBaseRefusesAnUnknownFile(t *testing.T) {
	_, err := ConfigureBase("<configuration><core></core></configuration>", 1, 2, false)
	if err == nil || !strings.Contains(err.Error(), "<acceptors>") {
		t.Fatalf("err = %v, want one naming <acceptors>", err)
	}
}

// Every acceptor and connector of every rendering is on 127.0.0.1.
func TestEverythingOnLoopback(t *testing.T) {
	for _, name := range []string{"single.golden.xml", "ha-primary.golden.xml", "ha-backup.golden.xml", "cluster-1.golden.xml", "cluster-2.golden.xml"} {
		x := readTestdata(t, name)
		n := 0
		for _, l := range strings.Split(x, "\n") {
			if (strings.Contains(l, "<acceptor ") || strings.Contains(l, "<connector ")) && !strings.Contains(l, "<!--") {
				n++
				if !strings.Contains(l, "tcp://127.0.0.1:") {
					t.Errorf("%s: not on loopback: %s", name, strings.TrimSpace(l))
				}
			}
		}
		if n < 2 {
			t.Errorf("%s: %d acceptors and connectors, want at least 2", name, n)
		}
	}
}

func TestSetHeap(t *testing.T) {
	got := SetHeap(readTestdata(t, "created-artemis.profile"), "512m", "2g")
	checkGolden(t, "heap.golden.profile", got) // sed -E "s/-Xms[^ \"]*/-Xms512m/; s/-Xmx[^ \"]*/-Xmx2g/"
}

func TestAddNodlq(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"babel = x", "babel = x\nnodlq = nodlq-pw\n"},
		{"babel = x\n", "babel = x\nnodlq = nodlq-pw\n"},
		{"", "nodlq = nodlq-pw\n"},
		{"babel = x\n  nodlq: other\n", "babel = x\n  nodlq: other\n"},
		{"nodlqx = y\n", "nodlqx = y\nnodlq = nodlq-pw\n"},
	} {
		got, changed := AddNodlq(tc.in, "nodlq = nodlq-pw")
		if got != tc.want || changed != (tc.in != tc.want) {
			t.Errorf("AddNodlq(%q) = %q, %v; want %q", tc.in, got, changed, tc.want)
		}
	}
}
