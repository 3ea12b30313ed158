package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestOutboxExample(t *testing.T) {
	cfg := Config{BrokerURL: os.Getenv("ARTEMIS_URL"), DatabaseURL: os.Getenv("BQ_POSTGRES_URL"), Timeout: time.Minute}
	if cfg.BrokerURL == "" || cfg.DatabaseURL == "" {
		t.Skip("ARTEMIS_URL or BQ_POSTGRES_URL not set: run eval \"$(scripts/artemis start)\" and eval \"$(scripts/postgres start)\"")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cfg.Queue = "ex-outbox." + hex.EncodeToString(b)
	cfg.Schema = "ex_outbox_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), cfg.DatabaseURL); err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{cfg.Schema}.Sanitize()+" CASCADE")
			_ = conn.Close(context.Background())
		}
	})

	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	t.Log(text)
	for _, want := range []string{
		"order 1004  rolled back (out of stock): no order row, no message",
		"billing  order 1002 attempt 0: card network timeout after the charge row was written -> rolled back",
		"billing  order 1002 charged 990 cents (attempt 1)",
		"billing  order 1001 charged 1250 cents (attempt 0)",
		"accepted without a second charge",
		"summary  4 orders, 4 messages published, 4 charges",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if n := strings.Count(text, "charged"); n != 4 {
		t.Errorf("%d charges printed, want 4", n)
	}

	// The effects in the database: one charge per committed order.
	conn, err := pgx.Connect(context.Background(), cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var bad int
	err = conn.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{cfg.Schema, "shop_orders"}.Sanitize()+` o
WHERE (SELECT count(*) FROM `+pgx.Identifier{cfg.Schema, "shop_charges"}.Sanitize()+` c WHERE c.order_id = o.id) <> 1`).Scan(&bad)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d orders without exactly one charge", bad)
	}
}
