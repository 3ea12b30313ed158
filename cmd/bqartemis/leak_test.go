package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/babelqueue/babelqueue-go-artemis/internal/redact/leaktest"
)

// leakCommands are every command's invocations that reach the broker, and
// a TLS flag that the URL may refuse, each given little time.
var leakCommands = [][]string{
	{"inspect", "q.dlq"},
	{"peek", "q"},
	{"redrive", "q.dlq"},
	{"redrive", "q.dlq", "-to", "q2"},
	{"redrive", "q.dlq", "-dry-run"},
	{"publish", "q", "urn:x", "{}"},
	{"stats"},
	{"stats", "q"},
	{"peek", "q", "-tls-server-name", "broker.example"},
}

// TestNoPieceOfThePasswordInAnyCommandsOutput runs every command with
// every URL form of the leak table, given by -url and by $ARTEMIS_URL,
// against a loopback port that refuses and one that never answers: the
// output shows no password, and no piece of one.
func TestNoPieceOfThePasswordInAnyCommandsOutput(t *testing.T) {
	ports := map[string]string{"refused": leaktest.ClosedPort(t), "silent": leaktest.SilentPort(t)}
	for _, tc := range leaktest.Cases() {
		for name, addr := range ports {
			raw := tc.URLFor(addr)
			t.Run(fmt.Sprintf("%s/%q", name, raw), func(t *testing.T) {
				t.Parallel()
				for _, cmd := range leakCommands {
					for _, viaFlag := range []bool{true, false} {
						if name == "silent" && !viaFlag {
							continue // the same path as the flag; each run waits out -timeout
						}
						env := map[string]string{envPassword: tc.EnvPassword}
						args := append([]string(nil), cmd...)
						args = append(args, "-timeout", "150ms")
						if viaFlag {
							args = append(args, "-url", raw)
						} else {
							env[envURL] = raw
						}
						out, errOut, code := runCLI(t, env, "", args...)
						if code == exitOK {
							t.Errorf("%v: exit 0 with no broker", args)
						}
						if strings.TrimSpace(errOut) == "" {
							t.Errorf("%v: exit %d and nothing on stderr", args, code)
						}
						leaktest.Check(t, tc, fmt.Sprintf("bqartemis %s (URL by flag: %v)", strings.Join(cmd, " "), viaFlag), out+errOut)
					}
				}
			})
		}
	}
}
