package artemisctl

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

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
