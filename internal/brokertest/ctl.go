package brokertest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/babelqueue/babelqueue-go-artemis/internal/artemisctl"
)

// The pair's and the cluster's kill and restart helpers call package
// artemisctl (what scripts/artemis runs) directly when the node's instance
// directory is one scripts/artemis made: <root>/.artemis/instances/<node>.
// Otherwise (no ARTEMIS_*_DIR in the environment) they run the script
// (ARTEMIS_SCRIPT, else scripts/artemis).

// ctlRoot returns the repository root of the instance directory dir of the
// node named node, or "" when dir is not such a directory.
func ctlRoot(dir, node string) string {
	if dir == "" || filepath.Base(dir) != node {
		return ""
	}
	instances := filepath.Dir(dir)
	base := filepath.Dir(instances)
	if filepath.Base(instances) != "instances" || filepath.Base(base) != ".artemis" {
		return ""
	}
	return filepath.Dir(base)
}

// directCtl is an artemisctl.Ctl for root with the test's environment plus
// env. done logs what it wrote to stderr, with the operation's name and
// duration, and fails the test when err is not nil.
func directCtl(t testing.TB, root, op string, env ...string) (c *artemisctl.Ctl, done func(err error)) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c = artemisctl.New(root, append(os.Environ(), env...), &stdout, &stderr)
	start := time.Now()
	return c, func(err error) {
		t.Helper()
		if msg := strings.TrimSpace(stderr.String()); msg != "" || err != nil {
			t.Logf("artemisctl %s (%v): %s", op, time.Since(start).Round(time.Millisecond), msg)
		}
		if err != nil {
			t.Fatalf("artemisctl %s: %v", op, err)
		}
	}
}
