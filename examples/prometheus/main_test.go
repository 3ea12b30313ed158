package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
		t.Fatalf("scrape: %v", compared)
	}

	// Every counter and histogram count, exactly as the exporter renders
	// the module's instruments.
	send := fmt.Sprintf(`messaging_destination_name="%s",messaging_operation_name="send",messaging_operation_type="send",messaging_system="activemq"`, queue)
	proc := fmt.Sprintf(`messaging_destination_name="%s",messaging_operation_name="process",messaging_operation_type="process",messaging_system="activemq"`, queue)
	for _, want := range []string{
		`messaging_client_sent_messages_total{` + send + `} 5`,
		`messaging_client_operation_duration_seconds_count{` + send + `} 5`,
		`messaging_client_consumed_messages_total{` + proc + `} 7`,
		`messaging_process_duration_seconds_count{` + proc + `} 4`,
		`messaging_process_duration_seconds_count{error_type="handler_failed",` + proc + `} 3`,
		`babelqueue_settlements_total{babelqueue_disposition="accepted",` + proc + `} 4`,
		`babelqueue_settlements_total{babelqueue_disposition="scheduled",error_type="handler_failed",` + proc + `} 2`,
		`babelqueue_settlements_total{babelqueue_disposition="dead_lettered",error_type="handler_failed",` + proc + `} 1`,
		`babelqueue_settlement_duration_seconds_count{babelqueue_disposition="accepted",` + proc + `} 4`,
		`babelqueue_retries_total{babelqueue_disposition="scheduled",error_type="handler_failed",` + proc + `} 1`,
		`babelqueue_retries_total{babelqueue_disposition="dead_lettered",error_type="handler_failed",` + proc + `} 1`,
		`babelqueue_dead_letters_total{babelqueue_disposition="dead_lettered",error_type="handler_failed",` + proc + `} 1`,
		`# TYPE babelqueue_settlements_total counter`,
		`# TYPE messaging_process_duration_seconds histogram`,
	} {
		if !strings.Contains(scraped, want+"\n") {
			t.Errorf("the scrape lacks %q", want)
		}
	}
	if strings.Count(scraped, "\nbabelqueue_settlements_total{") != 3 {
		t.Errorf("want exactly three babelqueue_settlements_total series:\n%s", scraped)
	}
	// The example printed its own scrape.
	if want := `babelqueue_settlements_total{babelqueue_disposition="accepted",` + proc + `} 4`; !strings.Contains(out, want) {
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
