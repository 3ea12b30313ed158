package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/babelqueue/babelqueue-go-artemis/examples/internal/exampletest"
)

func TestMetricsEndpointThroughTheBroker(t *testing.T) {
	var scraped, endpoint string
	var compared error
	served := false
	ex := exampletest.New(t, "ex-prometheus")
	queue := ex.Queue
	ex.Purge(queue + ".dlq")

	cfg := config{Config: ex.Config(time.Minute), Listen: "127.0.0.1:0",
		Serving: func(metricsURL string) {
			served, endpoint = true, metricsURL
			// The counters, exactly.
			compared = testutil.ScrapeAndCompare(metricsURL, strings.NewReader(fmt.Sprintf(`
# HELP babelqueue_publishes_total Publishes, by outcome (accepted, not_accepted, unknown, error).
# TYPE babelqueue_publishes_total counter
babelqueue_publishes_total{outcome="accepted",queue="%[1]s"} 5
# HELP babelqueue_settlements_total Deliveries settled, by disposition and error kind (empty on success).
# TYPE babelqueue_settlements_total counter
babelqueue_settlements_total{disposition="accepted",kind="",queue="%[1]s"} 4
babelqueue_settlements_total{disposition="dead_lettered",kind="handler_failed",queue="%[1]s"} 1
babelqueue_settlements_total{disposition="scheduled",kind="handler_failed",queue="%[1]s"} 2
`, queue)), "babelqueue_publishes_total", "babelqueue_settlements_total")
			resp, err := http.Get(metricsURL)
			if err != nil {
				compared = err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			scraped = string(b)
		}}
	out := ex.Run(func(ctx context.Context, w io.Writer) error { return run(ctx, cfg, w) })
	if !served {
		t.Fatal("the endpoint was never announced as serving")
	}
	if compared != nil {
		t.Errorf("scraped counters: %v", compared)
	}

	// The histograms count every event.
	for _, want := range []string{
		fmt.Sprintf(`babelqueue_publish_duration_seconds_count{queue="%s"} 5`, queue),
		fmt.Sprintf(`babelqueue_settlement_duration_seconds_count{disposition="accepted",queue="%s"} 4`, queue),
		fmt.Sprintf(`babelqueue_settlement_duration_seconds_count{disposition="scheduled",queue="%s"} 2`, queue),
		fmt.Sprintf(`babelqueue_settlement_duration_seconds_count{disposition="dead_lettered",queue="%s"} 1`, queue),
		fmt.Sprintf(`babelqueue_handler_duration_seconds_count{queue="%s"} 7`, queue),
	} {
		if !strings.Contains(scraped, want+"\n") {
			t.Errorf("the scrape lacks %q", want)
		}
	}
	// The example printed its own scrape.
	if want := fmt.Sprintf(`babelqueue_publishes_total{outcome="accepted",queue="%s"} 5`, queue); !strings.Contains(out, want) {
		t.Errorf("the output lacks %q", want)
	}
	// And the endpoint is gone once run returned.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := scrape(ctx, endpoint); err == nil {
		t.Error("the endpoint still serves after run returned")
	}
	if dlq := ex.Browse(queue + ".dlq"); len(dlq) != 1 {
		t.Errorf("%d messages on %s.dlq, want the failing order's copy", len(dlq), queue)
	}
}

func TestListenMustBeLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9464", ":9464", "example.com:9464", "nonsense"} {
		if _, _, err := serve(addr, nil); err == nil {
			t.Errorf("serve(%q) started: want a refusal of a non-loopback address", addr)
		}
	}
}
