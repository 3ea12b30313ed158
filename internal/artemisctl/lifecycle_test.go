package artemisctl

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sleeper starts `sleep 30`; it is killed and reaped when the test ends.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep command: ", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func TestAliveIgnoresZombies(t *testing.T) {
	if !alive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := sleeper(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped (no Wait yet): a zombie, which has released everything.
	deadline := time.Now().Add(10 * time.Second)
	for alive(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("a SIGKILLed child still counts as alive")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStopPid(t *testing.T) {
	cmd := sleeper(t)
	if !stopPid(cmd.Process.Pid, syscall.SIGTERM, 10*time.Second) {
		t.Fatal("sleep did not stop on SIGTERM")
	}
}

func readyInstance(t *testing.T, console string) (*Instance, *strings.Builder) {
	t.Helper()
	var out, errb strings.Builder
	c := New(t.TempDir(), nil, &out, &errb)
	c.StartTimeout = time.Second
	i, _ := c.Instance("bgo-ready")
	if err := os.MkdirAll(filepath.Dir(i.console), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(i.console, []byte(console), 0o644); err != nil {
		t.Fatal(err)
	}
	return i, &errb
}

func TestWaitReady(t *testing.T) {
	port := listen(t)
	t.Run("acceptor up", func(t *testing.T) {
		i, _ := readyInstance(t, "x AMQ221020: Started EPOLL Acceptor at 127.0.0.1:"+port+" for protocols [AMQP]\n")
		if err := i.waitReady(os.Getpid(), port); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("backup synchronized", func(t *testing.T) {
		i, _ := readyInstance(t, "AMQ221024: Backup server ... is synchronized with primary server\n")
		i.waitBackup = true
		if err := i.waitReady(os.Getpid(), ""); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("process gone", func(t *testing.T) {
		i, errb := readyInstance(t, "Error: something broke\n")
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Skip(err)
		}
		err := i.waitReady(cmd.Process.Pid, port)
		if ExitCode(err) != 1 || !strings.Contains(errb.String(), "exited during start-up") || !strings.Contains(errb.String(), "something broke") {
			t.Fatalf("err %v, stderr %q", err, errb)
		}
	})
	t.Run("timeout kills it", func(t *testing.T) {
		i, errb := readyInstance(t, "starting\n")
		cmd := sleeper(t)
		err := i.waitReady(cmd.Process.Pid, port) // the log never says the acceptor started
		if ExitCode(err) != 1 || !strings.Contains(errb.String(), "did not accept AMQP connections on 127.0.0.1:"+port+" within 1 s") {
			t.Fatalf("err %v, stderr %q", err, errb)
		}
		if st, _ := cmd.Process.Wait(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the half-started process was not SIGKILLed: %v", st)
		}
	})
}

// A start whose port is taken fails before it fetches or unpacks Artemis
// and before it creates the instance: at once, naming the port and what
// holds it, not minutes later.
func TestStartChecksThePortsFirst(t *testing.T) {
	for _, tc := range []struct{ name, env, want string }{
		{"AMQP", "ARTEMIS_AMQP_PORT", "AMQP port 127.0.0.1:"},
		{"CORE", "ARTEMIS_CORE_PORT", "CORE port 127.0.0.1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := t.TempDir() // no Artemis zip in it: a fetch would be attempted
			taken := listen(t)
			// An empty PATH for the children: a start that went on to
			// fetch Artemis would fail at once, not reach the network.
			env := []string{"MAVEN_REPO_LOCAL=" + repo, tc.env + "=" + taken, "PATH="}
			if tc.name == "CORE" {
				n, err := FreePort()
				if err != nil {
					t.Fatal(err)
				}
				env = append(env, "ARTEMIS_AMQP_PORT="+strconv.Itoa(n))
			}
			c, _, errb := testCtl(t, env...)
			i, err := c.Instance("default")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = i.StartNode()
			if ExitCode(err) != 1 || !strings.Contains(errb.String(), tc.want+taken) || !strings.Contains(errb.String(), "is in use") {
				t.Fatalf("StartNode: %v, stderr %q", err, errb)
			}
			for _, step := range []string{"not found", "unpacking", "fetching", "creating instance"} {
				if strings.Contains(errb.String(), step) {
					t.Errorf("it went on to %q before checking the port: %q", step, errb)
				}
			}
			if exists(c.Dist) || exists(i.Dir) {
				t.Errorf("it unpacked or created something: %s %s", c.Dist, i.Dir)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("it took %v", d)
			}
		})
	}
}
