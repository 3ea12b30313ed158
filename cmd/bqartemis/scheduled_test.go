package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// What Artemis 2.40 answers listScheduledMessagesAsJSON with, for a
// scheduled retry copy and for a message of another producer.
const scheduledReply = `"[{\"bq_attempts\":\"1\",\"x-opt-delivery-time\":1796291869404,\"durable\":true,\"_AMQ_AD\":\"orders\",\"x-opt-jms-type\":\"urn:babel:orders:created\",\"address\":\"orders\",\"subject\":\"urn:babel:orders:created\",\"messageID\":1370,\"expiration\":0,\"priority\":4,\"userID\":\"ID:f1e2d3c4-b5a6-4789-90ab-cdef01234567\",\"timestamp\":0},{\"x-opt-delivery-time\":1796291800000,\"subject\":\"urn:other:thing\",\"userID\":\"ID:7\"}]"`

func TestReadScheduled(t *testing.T) {
	rows, err := readScheduled(json.RawMessage(scheduledReply))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	// The soonest due first.
	if rows[0].ID != "7" || rows[0].URN != "urn:other:thing" || rows[0].Attempts != nil {
		t.Errorf("first row %+v", rows[0])
	}
	r := rows[1]
	if r.ID != "f1e2d3c4-b5a6-4789-90ab-cdef01234567" || r.URN != "urn:babel:orders:created" || r.Attempts == nil || *r.Attempts != 1 ||
		!r.Due.Equal(time.UnixMilli(1796291869404)) {
		t.Errorf("second row %+v", r)
	}
	var out bytes.Buffer
	if err := printScheduled(&out, rows, false, time.UnixMilli(1796291859404)); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"DUE", "ATTEMPTS", "2026-12-03T", "10s", "urn:babel:orders:created", "f1e2d3c4-b5a6-4789-90ab-cdef01234567"} {
		if !strings.Contains(text, want) {
			t.Errorf("the table lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	if err := printScheduled(&out, rows[1:], true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, `"attempts":1`) || !strings.Contains(got, `"due":"2026-12-03T`) {
		t.Errorf("json: %s", got)
	}
	if _, err := readScheduled(json.RawMessage(`[1]`)); err == nil {
		t.Error("a reply that is not a JSON string was read")
	}
}
