package main

import (
	"strings"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"redrive", "redrive", 0}, {"redirve", "redrive", 1},
		{"inspcet", "inspect", 1}, {"stat", "stats", 1}, {"kitten", "sitting", 3}, {"peek", "publish", 6},
	} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	for _, c := range []struct {
		typed string
		want  string // "" no suggestion: the whole help instead
	}{
		{"redirve", "did you mean redrive?"},
		{"inspectt", "did you mean inspect?"},
		{"stat", "did you mean stats?"},
		{"PEEK", "did you mean peek?"},
		{"valid", "did you mean validate?"},
		{"purge", ""},
		{"nope", ""},
	} {
		out, errOut, code := runCLI(t, nil, "", c.typed)
		if code != exitUsage || out != "" {
			t.Fatalf("%s: exit %d, stdout %q", c.typed, code, out)
		}
		if !strings.Contains(errOut, `unknown command "`+c.typed+`"`) {
			t.Errorf("%s: %q", c.typed, errOut)
		}
		if c.want == "" {
			if strings.Contains(errOut, "did you mean") || !strings.Contains(errOut, "commands:") {
				t.Errorf("%s: want the command list and no suggestion, got %q", c.typed, errOut)
			}
			continue
		}
		if !strings.Contains(errOut, c.want) || strings.Contains(errOut, "commands:") {
			t.Errorf("%s: want %q, got %q", c.typed, c.want, errOut)
		}
		// help TYPO suggests the same.
		_, errOut, _ = runCLI(t, nil, "", "help", c.typed)
		if !strings.Contains(errOut, c.want) {
			t.Errorf("help %s: want %q, got %q", c.typed, c.want, errOut)
		}
	}
}

func TestRecordKeyTellsRecordsApart(t *testing.T) {
	at1, at2 := int64(1), int64(2)
	a := &record{Kind: kindDeadLetter, MessageID: "m", FailedAt: &at1}
	b := &record{Kind: kindDeadLetter, MessageID: "m", FailedAt: &at2} // the same message, dead-lettered again
	c := &record{Kind: kindEnvelope, MessageID: "m", brokerMsgID: "7"}
	d := &record{Kind: kindEnvelope, MessageID: "m", brokerMsgID: "8"}
	keys := map[string]bool{}
	for _, r := range []*record{a, b, c, d} {
		keys[recordKey(r)] = true
	}
	if len(keys) != 4 {
		t.Errorf("%d keys for 4 records", len(keys))
	}
	if recordKey(a) != recordKey(&record{Kind: kindDeadLetter, MessageID: "m", FailedAt: &at1}) {
		t.Error("one record, two keys")
	}
}
