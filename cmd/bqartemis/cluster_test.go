package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
	"github.com/babelqueue/babelqueue-go-artemis/internal/brokertest"
)

func TestClusterFlagIsForThePerQueueCommands(t *testing.T) {
	env := map[string]string{envPassword: "pw"}
	_, errOut, code := runCLI(t, env, "", "publish", "q", "urn:a:b:c", "-cluster", "-url", "amqp://u@a:1", "-url", "amqp://u@b:1")
	if code != exitUsage || !strings.Contains(errOut, "-cluster does not apply to publish") {
		t.Fatalf("publish -cluster: exit %d, %q", code, errOut)
	}
	_, errOut, code = runCLI(t, map[string]string{}, "", "stats", "-cluster")
	if code != exitUsage || !strings.Contains(errOut, "one -url per member") {
		t.Fatalf("stats -cluster without -url: exit %d, %q", code, errOut)
	}
}

func TestClusterReportsEveryMemberAndItsFailure(t *testing.T) {
	// Nothing listens on these ports: each member fails, each is reported,
	// and no password shows.
	env := map[string]string{envPassword: "s3cr3t-pw"}
	out, errOut, code := runCLI(t, env, "", "stats", "-cluster", "-timeout", "2s",
		"-url", "amqp://u:s3cr3t-pw@127.0.0.1:1", "-url", "amqp://u@127.0.0.1:2")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitFailed, out, errOut)
	}
	for _, want := range []string{"== member 1: amqp://u:xxxxx@127.0.0.1:1", "== member 2: amqp://u@127.0.0.1:2", "member 1: FAILED", "member 2: FAILED"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "2 of 2 members failed") {
		t.Errorf("stderr: %q", errOut)
	}
	if strings.Contains(out+errOut, "s3cr3t-pw") {
		t.Errorf("the password shows:\n%s%s", out, errOut)
	}
}

// TestOnlyMissingTellsAnAbsentQueueFromAFailure: on a cluster, a queue
// that a member never got a message for does not exist there, nor a topic
// no client used there, which is not a failure of that member; anything
// else still is.
func TestOnlyMissingTellsAnAbsentQueueFromAFailure(t *testing.T) {
	other := errors.New("management request timed out")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"missing", missingQueue("orders.dlq"), true},
		{"missing, wrapped", fmt.Errorf("member 2: %w", missingQueue("orders.dlq")), true},
		{"two missing, joined", errors.Join(missingQueue("a"), missingQueue("b")), true},
		{"missing and a failure, joined", errors.Join(missingQueue("a"), other), false},
		{"a missing address", fmt.Errorf("member 3: %w", missingAddress("orders.events")), true},
		{"a missing address and queue, joined", errors.Join(missingAddress("a"), missingQueue("b")), true},
		{"a failure", other, false},
		{"an empty join", errors.Join(), false},
	} {
		if got := onlyMissing(tc.err); got != tc.want {
			t.Errorf("%s: onlyMissing = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// clusterEnv is the tool's environment and -url flags for the script's
// cluster (ARTEMIS_CLUSTER_URLS): one -url per member, without passwords.
func clusterEnv(t *testing.T) (*brokertest.Cluster, map[string]string, []string) {
	cl := brokertest.RequireCluster(t)
	var flags []string
	pass := ""
	for _, n := range cl.Nodes {
		u, err := url.Parse(n.URL)
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := u.User.Password(); ok {
			pass = p
		}
		u.User = url.User(u.User.Username())
		flags = append(flags, "-url", u.String())
	}
	return cl, map[string]string{envPassword: pass}, append(flags, "-cluster")
}

func TestIntegrationClusterStatsInspectAndRedrivePerMember(t *testing.T) {
	cl, env, members := clusterEnv(t)
	queue := brokertest.Queue(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := artemis.DialCluster(ctx, cl.Members(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	p, err := c.Publisher(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * len(cl.Nodes) {
		if _, err := p.Publish(ctx, artemis.Job(urnFail, map[string]int{"n": i})); err != nil {
			t.Fatal(err)
		}
	}
	out := cli(t, env, append([]string{"stats", queue, "-json"}, members...)...)
	for i := range cl.Nodes {
		if !strings.Contains(out, fmt.Sprintf("== member %d: ", i+1)) {
			t.Errorf("no section for member %d:\n%s", i+1, out)
		}
	}
	if got := strings.Count(out, `"messages":3`); got != len(cl.Nodes) {
		t.Errorf("want 3 messages on each of %d members:\n%s", len(cl.Nodes), out)
	}

	// Dead-letter them all. Each member dead-letters on its own DLQ (a
	// member whose consumer attached last may have seen its messages
	// redistributed to another first).
	cons, err := artemis.NewConsumer(artemis.Handlers{urnFail: func(context.Context, *artemis.Envelope, *amqp.Message) error {
		return errors.New("gateway timeout")
	}}, artemis.WithMaxTries(1))
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	consumed := make(chan struct{})
	go func() { _ = c.Consume(cctx, queue, cons); close(consumed) }()
	total := 3 * len(cl.Nodes)
	deadline := time.Now().Add(30 * time.Second)
	var per []int
	for {
		per = memberCounts(t, dlqStats(t, env, queue+".dlq", members))
		if sum(per) == total || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	ccancel()
	<-consumed
	if sum(per) != total || len(per) != len(cl.Nodes) {
		t.Fatalf("want %d dead letters over the members, got %v", total, per)
	}
	insp := cli(t, env, append([]string{"inspect", queue + ".dlq", "-json"}, members...)...)
	if got := strings.Count(insp, `{"kind":"dead_letter"`); got != total {
		t.Errorf("inspect: %d failed records, want %d:\n%s", got, total, insp)
	}
	redrive := cli(t, env, append([]string{"redrive", queue + ".dlq", "-all"}, members...)...)
	if strings.Count(redrive, "== member ") != len(cl.Nodes) {
		t.Errorf("redrive reports per member:\n%s", redrive)
	}
	back := memberCounts(t, cli(t, env, append([]string{"stats", queue, "-json"}, members...)...))
	left := memberCounts(t, dlqStats(t, env, queue+".dlq", members))
	if sum(back) != total || sum(left) != 0 {
		t.Errorf("after redrive: queue %v (want %d in all), DLQ %v (want none)", back, total, left)
	}
	// (Where the redriven messages are now is the cluster's business: with no
	// consumer anywhere, redistribution may gather them on one member.)
	fmt.Printf("cluster: bqartemis -cluster: stats, inspect and redrive per member: dead letters per member %v, redriven back to each member's queue %v\n", per, back)
}

// memberCounts reads the "messages" figure of each member's section of
// stats -json for one queue.
// dlqStats is `stats DLQ -json` over the members. A member that has
// dead-lettered nothing (yet) has no DLQ: stats reports that member's
// "no such queue" and exits 1, which counts as 0 messages there; any other
// failure fails the test.
func dlqStats(t *testing.T, env map[string]string, dlq string, members []string) string {
	t.Helper()
	args := append([]string{"stats", dlq, "-json"}, members...)
	out, errOut, code := runCLI(t, env, "", args...)
	if code != exitOK && (code != exitFailed || !strings.Contains(errOut, "no such queue")) {
		t.Fatalf("bqartemis %v: exit %d; stdout %q; stderr %q", args, code, out, errOut)
	}
	return out
}

func memberCounts(t *testing.T, out string) []int {
	t.Helper()
	var per []int
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "== member "):
			per = append(per, 0)
		case strings.HasPrefix(l, "{") && len(per) > 0:
			for _, m := range jsonLines(t, l) {
				if n, ok := m["messages"].(float64); ok {
					per[len(per)-1] += int(n)
				}
			}
		}
	}
	return per
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestIntegrationClusterStatsOfATopicPerMember: stats -address -cluster
// shows, on the member the subscriptions live on, each one with its DLQ;
// a member no client used the topic on has no such address, which it
// says, and that is no failure while another member has the topic.
func TestIntegrationClusterStatsOfATopicPerMember(t *testing.T) {
	cl, env, members := clusterEnv(t)
	topic := brokertest.Queue(t)
	billing, shipping := topic+".billing", topic+".shipping"
	const events = 2
	subscribeAndPublish(t, cl.Nodes[0].URL, topic, map[string][]artemis.ConsumerOption{billing: nil, shipping: nil}, billing, events)

	args := append([]string{"stats", "-address", topic, "-json"}, members...)
	var sections []string // each member's output, after its "== member" line
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := cli(t, env, args...) // exit 0: the members without the topic are no failure
		sections = strings.Split(out, "== member ")[1:]
		if len(sections) == len(cl.Nodes) && strings.Contains(sections[0], `"dlq":{"queue":"`+billing+`.dlq","messages":`+strconv.Itoa(events)+`,`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bqartemis %v: want member 1 to show %s.dlq with %d messages; stdout %q", args, billing, events, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	lines := jsonLines(t, sections[0][strings.Index(sections[0], "\n")+1:])
	if len(lines) != 2 || lines[0]["queue"] != billing || lines[1]["queue"] != shipping {
		t.Fatalf("member 1: %v, want %s and %s", lines, billing, shipping)
	}
	if d, _ := lines[1]["dlq"].(map[string]any); d == nil || d["queue"] != shipping+".dlq" || d["messages"] != float64(0) {
		t.Errorf("member 1, %s: dlq %v, want %s.dlq, empty", shipping, lines[1]["dlq"], shipping)
	}
	for i, sec := range sections[1:] {
		if strings.Contains(sec, "FAILED") || strings.Contains(sec, `"dlq"`) {
			t.Errorf("member %d, which no client used the topic on: %q", i+2, sec)
		}
	}
}
