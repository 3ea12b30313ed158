package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	artemis "github.com/babelqueue/babelqueue-go-artemis"
)

// runCLI runs the tool in-process with env as its environment.
func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = run(ctx, args, strings.NewReader(stdin), &out, &errb, func(k string) string { return env[k] })
	return out.String(), errb.String(), code
}

func TestUsageAndHelpExitCodes(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, exitUsage, "commands:"},
		{[]string{"help"}, exitOK, "inspect"},
		{[]string{"help", "redrive"}, exitOK, "-dry-run"},
		{[]string{"help", "nope"}, exitUsage, `unknown command "nope"`},
		{[]string{"nope"}, exitUsage, `unknown command "nope"`},
		{[]string{"inspect", "-h"}, exitOK, "-since"},
		{[]string{"stats", "-h"}, exitOK, "-tls-ca"},
		{[]string{"inspect"}, exitUsage, "want one dead-letter queue"},
		{[]string{"inspect", "a.dlq", "b.dlq"}, exitUsage, "got 2 arguments"},
		{[]string{"inspect", "a.dlq", "-bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{"inspect", "a.dlq", "-max", "-1"}, exitUsage, "-max -1"},
		{[]string{"redrive", "a.dlq", "-all", "-reason", "failed"}, exitUsage, "exclude each other"},
		{[]string{"publish", "q"}, exitUsage, "want QUEUE URN"},
		{[]string{"publish", "q", " ", "{}"}, exitUsage, "URN is blank"},
		{[]string{"publish", "q", "urn:x", "[1]"}, exitUsage, "not a JSON object"},
		{[]string{"publish", "q", "urn:x", "-priority", "10"}, exitUsage, "-priority 10"},
		{[]string{"publish", "q", "urn:x", "-header", "novalue"}, exitUsage, "want KEY=VALUE"},
		{[]string{"peek", "q"}, exitUsage, "no broker: give -url or set $ARTEMIS_URL"},
		{[]string{"peek", "q", "-url", "http://h:1"}, exitUsage, `scheme "http"`},
		{[]string{"peek", "q", "-url", "amqp://h:1", "-tls-ca", "ca.pem"}, exitUsage, "need amqps://"},
		{[]string{"peek", "q", "-url", "amqps://h:1", "-tls-cert", "c.pem"}, exitUsage, "go together"},
	}
	for _, tc := range cases {
		out, errOut, code := runCLI(t, nil, "", tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d; output %q lacks %q", tc.args, code, tc.code, out+errOut, tc.want)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	cases := []struct {
		args []string
		pos  []string
		json bool
		max  int
	}{
		{[]string{"q.dlq", "-json", "-max", "3"}, []string{"q.dlq"}, true, 3},
		{[]string{"-json", "q.dlq"}, []string{"q.dlq"}, true, 0},
		{[]string{"a", "-max=2", "b", "-json"}, []string{"a", "b"}, true, 2},
		{[]string{"a", "--", "-json"}, []string{"a", "-json"}, false, 0},
		{[]string{"q", "urn", "-"}, []string{"q", "urn", "-"}, false, 0},
	}
	for _, tc := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		j := fs.Bool("json", false, "")
		m := fs.Int("max", 0, "")
		pos, err := parseInterleaved(fs, tc.args)
		if err != nil || strings.Join(pos, "|") != strings.Join(tc.pos, "|") || *j != tc.json || *m != tc.max {
			t.Errorf("%v: pos %q json %v max %d err %v; want %q %v %d", tc.args, pos, *j, *m, err, tc.pos, tc.json, tc.max)
		}
	}
}

func TestConnectionErrorsNeverShowThePassword(t *testing.T) {
	secrets := []string{"s3cr@t/p:w%d", "hunter2", "päss wörd"}
	for _, pass := range secrets {
		u := "amqp://babel:" + urlEscape(pass) + "@127.0.0.1:1"
		for _, env := range []map[string]string{
			{envURL: u},
			{envURL: "amqp://babel@127.0.0.1:1", envPassword: pass},
			{envURL: "amqp://babel:" + pass + "@127.0.0.1:1"},     // not escaped: may not parse
			{envURL: "amqp://babel:" + urlEscape(pass) + "@[::1"}, // does not parse
		} {
			out, errOut, code := runCLI(t, env, "", "stats", "-timeout", "5s")
			all := out + errOut
			if code == exitOK {
				t.Fatalf("%v: exit 0", env)
			}
			for _, form := range []string{pass, urlEscape(pass)} {
				if strings.Contains(all, form) {
					t.Errorf("%v: the output shows the password (%q): %s", env, form, all)
				}
			}
		}
	}
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
		}
	}
	return b.String()
}

func TestScrubMasksEveryForm(t *testing.T) {
	var c connFlags
	c.secrets.Add("a b/c@d")
	c.secrets.Add("a b")
	got := c.scrub("x a b/c@d y a+b%2Fc%40d z a%20b%2Fc%40d w a b")
	if strings.Contains(got, "a b") || strings.Contains(got, "%40d") || strings.Count(got, "xxxxx") != 4 {
		t.Errorf("scrub left a secret: %q", got)
	}
}

func TestCredentials(t *testing.T) {
	c := connFlags{getenv: func(k string) string {
		return map[string]string{envURL: "amqp://u:p@h:1", envPassword: "envpass", envUser: "envuser"}[k]
	}}
	ts, err := c.targets()
	if err != nil || ts[0].user != "u" || ts[0].pass != "p" || ts[0].addr != "amqp://h:1" || ts[0].shown != "amqp://u:xxxxx@h:1" {
		t.Fatalf("from the URL: %+v %v", ts, err)
	}
	// -user replaces the URL's user only: the URL's password stays.
	c.user = "svc"
	ts, err = c.targets()
	if err != nil || ts[0].user != "svc" || ts[0].pass != "p" {
		t.Fatalf("-user with a URL password: %+v %v", ts, err)
	}
	c.urls = urlList{"amqp://h:1", "amqps://h:2"}
	c.user = "flaguser"
	ts, err = c.targets()
	if err != nil || len(ts) != 2 || ts[0].user != "flaguser" || ts[0].pass != "envpass" || !ts[1].tls {
		t.Fatalf("from the flags and env: %+v %v", ts, err)
	}
}

func TestFilter(t *testing.T) {
	now := time.UnixMilli(1_000_000_000)
	rec := func(reason, urn string, failedAt int64) *record {
		r := &record{URN: urn}
		if reason != "" {
			r.Reason = &reason
		}
		if failedAt != 0 {
			r.FailedAt = &failedAt
		}
		return r
	}
	cases := []struct {
		f    filter
		r    *record
		want bool
	}{
		{filter{}, rec("", "", 0), true},
		{filter{reason: "failed"}, rec("failed", "u", 1), true},
		{filter{reason: "failed"}, rec("poison", "u", 1), false},
		{filter{reason: "failed"}, rec("", "u", 0), false},
		{filter{urn: "u"}, rec("failed", "u", 1), true},
		{filter{urn: "u"}, rec("failed", "v", 1), false},
		{filter{since: time.Hour}, rec("failed", "u", now.Add(-time.Minute).UnixMilli()), true},
		{filter{since: time.Hour}, rec("failed", "u", now.Add(-2*time.Hour).UnixMilli()), false},
		{filter{since: time.Hour}, rec("gated", "u", 0), false},
	}
	for i, tc := range cases {
		tc.f.now = func() time.Time { return now }
		if got := tc.f.match(tc.r); got != tc.want {
			t.Errorf("case %d: match %v, want %v", i, got, tc.want)
		}
	}
}

// deadLetterMessage builds a DLQ record as the consumer writes it.
func deadLetterMessage(t *testing.T, reason string, failedAt int64) *amqp.Message {
	t.Helper()
	env, err := artemis.NewEnvelope("urn:babel:orders:created", map[string]any{"order_id": 1042}, artemis.EnvelopeQueue("orders"))
	if err != nil {
		t.Fatal(err)
	}
	text := "gateway <timeout>"
	exc := "*app.GatewayError"
	env.Attempts = 2
	env.DeadLetter = &artemis.DeadLetter{Reason: reason, Error: &text, Exception: &exc, FailedAt: failedAt, OriginalQueue: "orders", Attempts: 2, Lang: "go"}
	msg, err := artemis.NewMessage(env, artemis.WithHeaders(map[string]string{"traceparent": "00-t-s-01"}))
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// The JSON line of each kind of record has every field the issue names,
// with the values of the record.
func TestRecordJSONLines(t *testing.T) {
	str := func(s string) *amqp.Message { return &amqp.Message{Value: s} }
	gated := &amqp.Message{Value: `{"job":"urn:x","trace_id":"t","data":{},"meta":{"id":"m","schema_version":2},"attempts":0}`,
		ApplicationProperties: map[string]any{artemis.PropSchemaVersion: "2"}}
	cases := []struct {
		name string
		msg  *amqp.Message
		want map[string]any // field -> JSON value
	}{
		{"failed", deadLetterMessage(t, "failed", 1749132730000), map[string]any{
			"kind": "dead_letter", "reason": "failed", "error": "gateway <timeout>", "exception": "*app.GatewayError",
			"urn": "urn:babel:orders:created", "original_queue": "orders", "attempts": 2.0, "failed_at": 1749132730000.0}},
		{"poison text", str(`{"raw":"not json","dead_letter":{"reason":"poison","error":"bad","exception":null,"failed_at":5,"original_queue":"orders","attempts":0,"lang":"go"}}`), map[string]any{
			"kind": "poison", "reason": "poison", "raw": "not json", "failed_at": 5.0, "exception": nil, "original_queue": "orders"}},
		{"poison base64", str(`{"raw":"/w==","raw_encoding":"base64","dead_letter":{"reason":"poison","error":null,"exception":null,"failed_at":5,"original_queue":"q","attempts":0,"lang":"go"}}`), map[string]any{
			"kind": "poison", "raw": "/w==", "raw_encoding": "base64", "error": nil}},
		{"gated", gated, map[string]any{"kind": "gated", "reason": "gated", "bq_schema_version": "2", "urn": "urn:x", "trace_id": "t", "failed_at": nil, "original_queue": nil}},
		{"not json", str("hello <world>"), map[string]any{"kind": "poison", "body": "hello <world>", "reason": nil}},
		{"not utf8", &amqp.Message{Data: [][]byte{{0xff, 0xfe}}}, map[string]any{"kind": "poison", "body": "//4=", "body_encoding": "base64"}},
		{"no body", &amqp.Message{}, map[string]any{"kind": "poison"}},
	}
	required := []string{"kind", "reason", "error", "exception", "urn", "message_id", "trace_id", "original_queue", "attempts", "failed_at", "body"}
	for _, tc := range cases {
		b, err := marshal(readRecord(tc.msg))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(`\u003c`)) {
			t.Errorf("%s: HTML-escaped: %s", tc.name, b)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v: %s", tc.name, err, b)
		}
		for _, k := range required {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: no %q in %s", tc.name, k, b)
			}
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %#v, want %#v (%s)", tc.name, k, got[k], v, b)
			}
		}
	}
	// The body of a valid record is the envelope itself, as JSON.
	var line struct {
		Body struct {
			Job        string          `json:"job"`
			DeadLetter json.RawMessage `json:"dead_letter"`
		} `json:"body"`
	}
	b, _ := marshal(readRecord(deadLetterMessage(t, "failed", 1)))
	if err := json.Unmarshal(b, &line); err != nil || line.Body.Job != "urn:babel:orders:created" || len(line.Body.DeadLetter) == 0 {
		t.Errorf("body: %s (%v)", b, err)
	}
}

func TestPeekLineHasDeliveryDetails(t *testing.T) {
	p := publishFlags{group: "g1", ttl: 90 * time.Second, priority: 7, delay: time.Hour, headers: headerList{"traceparent": "00-a-b-01"}}
	_, msg, err := buildPublish("orders", "urn:babel:orders:created", []byte(`{"n":9007199254740993}`), &p)
	if err != nil {
		t.Fatal(err)
	}
	msg.Header.DeliveryCount = 3
	b, _ := marshal(readRecord(msg).withDelivery(msg))
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	for k, v := range map[string]any{"group_id": "g1", "ttl": 90000.0, "priority": 7.0, "delivery_count": 3.0, "urn": "urn:babel:orders:created", "kind": "envelope"} {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v: %s", k, got[k], v, b)
		}
	}
	if _, ok := got["delivery_time"].(float64); !ok {
		t.Errorf("no delivery_time: %s", b)
	}
	if !bytes.Contains(b, []byte(`"n":9007199254740993`)) || !bytes.Contains(b, []byte(`"traceparent":"00-a-b-01"`)) {
		t.Errorf("data or header lost: %s", b)
	}
}

func TestPublishDeliveryFlags(t *testing.T) {
	_, msg, err := buildPublish("orders", "urn:x", nil, &publishFlags{priority: -1})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Priority != 4 || msg.Header.TTL != 0 || msg.Properties.GroupID != nil {
		t.Errorf("no flags changed the message: %+v %+v", msg.Header, msg.Properties)
	}
	_, msg, err = buildPublish("orders", "urn:x", nil, &publishFlags{group: "g", ttl: 1500 * time.Millisecond, priority: 0})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Priority != 0 || msg.Header.TTL != 1500*time.Millisecond || *msg.Properties.GroupID != "g" || !msg.Header.Durable {
		t.Errorf("flags not applied: %+v %+v", msg.Header, msg.Properties)
	}
	if _, _, err := buildPublish("orders", "urn:x", nil, &publishFlags{priority: 10}); err == nil {
		t.Error("priority 10 was not refused")
	}
}

func TestRedrivePlan(t *testing.T) {
	f := redriveFlags{}
	m := f.plan(deadLetterMessage(t, "failed", 100), "orders.dlq")
	if !m.ok || m.target != "orders" {
		t.Fatalf("a failed record does not move to orders: %+v", m)
	}
	body := m.msg.Value.(string)
	if strings.Contains(body, "dead_letter") || !strings.Contains(body, `"attempts":0}`) || m.msg.ApplicationProperties[artemis.PropAttempts] != "0" {
		t.Errorf("the copy is no fresh delivery: %s %v", body, m.msg.ApplicationProperties)
	}
	if m.msg.ApplicationProperties["traceparent"] != "00-t-s-01" {
		t.Errorf("the header was lost: %v", m.msg.ApplicationProperties)
	}
	dup := m.msg.ApplicationProperties[artemis.PropDuplicateID]
	// Same record (same message id, failed_at): same id; another failure: another id.
	rec := readRecord(deadLetterMessage(t, "failed", 100))
	rec2 := *rec
	rec2.FailedAt = ptr(int64(101))
	same := *rec // the same record read again
	if redriveID("orders.dlq", rec) != redriveID("orders.dlq", &same) || redriveID("orders.dlq", rec) == redriveID("orders.dlq", &rec2) {
		t.Error("the duplicate id is not per record")
	}
	if dup == nil || dup == m.rec.MessageID {
		t.Errorf("duplicate id %v must be set and differ from meta.id", dup)
	}

	if m := f.plan(deadLetterMessage(t, "unknown_urn", 1), "orders.dlq"); m.ok || !strings.Contains(m.why, "-all") {
		t.Errorf("unknown_urn moved without -all: %+v", m)
	}
	if m := (&redriveFlags{all: true, to: "other"}).plan(deadLetterMessage(t, "unknown_urn", 1), "orders.dlq"); !m.ok || m.target != "other" {
		t.Errorf("-all -to other: %+v", m)
	}
	if m := (&redriveFlags{urn: "urn:nope"}).plan(deadLetterMessage(t, "failed", 1), "orders.dlq"); m.ok {
		t.Errorf("-urn mismatch moved: %+v", m)
	}
	if m := (&redriveFlags{all: true}).plan(&amqp.Message{Value: `{"raw":"x","dead_letter":{"reason":"poison","error":null,"exception":null,"failed_at":1,"original_queue":"orders","attempts":0,"lang":"go"}}`}, "orders.dlq"); m.ok || !strings.Contains(m.why, "poison") {
		t.Errorf("a poison record moved: %+v", m)
	}
	if m := (&redriveFlags{all: true}).plan(&amqp.Message{Value: "{}", ApplicationProperties: map[string]any{artemis.PropSchemaVersion: "2"}}, "orders.dlq"); m.ok || !strings.Contains(m.why, "gated") {
		t.Errorf("a gated forward moved: %+v", m)
	}
}

// TestGlobalFlagsBeforeTheCommand: the connection flags go before the
// command too (bqartemis -url URL stats), as git and kubectl take them.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-url", "http://h:1", "stats"}, exitUsage, `scheme "http"`},
		{[]string{"-url=http://h:1", "peek", "q"}, exitUsage, `scheme "http"`},
		{[]string{"--url", "http://h:1", "-timeout", "1s", "stats", "q"}, exitUsage, `scheme "http"`},
		{[]string{"-url", "amqp://h:1", "-tls-ca", "ca.pem", "peek", "q"}, exitUsage, "need amqps://"},
		{[]string{"-timeout", "1s", "stats", "-url", "http://h:1"}, exitUsage, `scheme "http"`},
		{[]string{"-url", "http://h:1"}, exitUsage, "no command"},
		{[]string{"-json", "stats"}, exitUsage, "-json"},
		{[]string{"-url", "http://h:1", "nope"}, exitUsage, `unknown command "nope"`},
		{[]string{"-h"}, exitOK, "commands:"},
		{[]string{"-url", "http://h:1", "help", "stats"}, exitOK, "-json"},
	}
	for _, tc := range cases {
		out, errOut, code := runCLI(t, nil, "", tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d; output %q lacks %q", tc.args, code, tc.code, out+errOut, tc.want)
		}
	}
	// The flag before the command reaches the connection.
	_, errOut, code := runCLI(t, map[string]string{envURL: "amqp://h:1"}, "", "-url", "http://from-flag:1", "stats")
	if code != exitUsage || !strings.Contains(errOut, "from-flag") {
		t.Errorf("the -url before the command did not win over $ARTEMIS_URL: exit %d: %s", code, errOut)
	}
}

// TestRunLeavesItsArgumentsAlone: run does not write into the caller's
// argument slice.
func TestRunLeavesItsArgumentsAlone(t *testing.T) {
	args := []string{"-url", "http://h:1", "stats", "q"}
	want := strings.Join(args, " ")
	runCLI(t, nil, "", args...)
	args = []string{"stats", "q", "-url", "http://h:1"}
	want2 := strings.Join(args, " ")
	runCLI(t, nil, "", args...)
	if got := strings.Join(args, " "); got != want2 {
		t.Errorf("args became %q, want %q (and %q)", got, want2, want)
	}
}

func TestRedriveBypassHeader(t *testing.T) {
	src := deadLetterMessage(t, "failed", 100)
	if m := (&redriveFlags{bypass: true}).plan(src, "orders.dlq"); !m.ok || m.msg.ApplicationProperties["bq-replay-bypass"] != "true" {
		t.Errorf("-bypass: %+v", m.msg.ApplicationProperties)
	}
	src.ApplicationProperties["bq-replay-bypass"] = "true" // a record of a bypassed replay
	if m := (&redriveFlags{}).plan(src, "orders.dlq"); !m.ok || m.msg.ApplicationProperties["bq-replay-bypass"] != nil {
		t.Errorf("without -bypass: %+v", m.msg.ApplicationProperties)
	}
}
