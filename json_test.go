package artemis

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

func TestEncodeRejectsNonObjectData(t *testing.T) {
	for _, data := range []string{`[]`, `null`, `"x"`, `1`} {
		env := &Envelope{Job: "urn:a:b", TraceID: "t", Data: json.RawMessage(data)}
		if b, err := env.Encode(); err == nil || !errors.Is(err, ErrInvalidEnvelope) {
			t.Errorf("Encode with data %s: %s, %v; want an ErrInvalidEnvelope", data, b, err)
		}
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct {
		in   string
		want string
		back string // what the JSON reads back as, when not in
	}{
		{in: "", want: `""`},
		{in: "urn:babel:orders:created", want: `"urn:babel:orders:created"`},
		{in: `say "hi" \ bye`, want: `"say \"hi\" \\ bye"`},
		{in: "\n\r\t\b\f", want: `"\n\r\t\b\f"`},
		{in: "\x00\x01\x0b\x1f\x7f", want: "\"\\u0000\\u0001\\u000b\\u001f\x7f\""},
		{in: "<b>&</b> a/b", want: `"<b>&</b> a/b"`},
		{in: "a\u2028b\u2029c", want: "\"a\u2028b\u2029c\""},
		{in: "café ☕ 日本 😀", want: `"café ☕ 日本 😀"`},
		{in: "a\xffb", want: "\"a\ufffdb\"", back: "a\ufffdb"},
		{in: "\xc3", want: "\"\ufffd\"", back: "\ufffd"},
		{in: "x\xed\xa0\x80", want: "\"x\ufffd\ufffd\ufffd\"", back: "x\ufffd\ufffd\ufffd"},
	}
	for _, tt := range tests {
		got := string(appendString([]byte("prefix:"), tt.in))
		if got != "prefix:"+tt.want {
			t.Errorf("appendString(%q) = %s, want %s", tt.in, got, tt.want)
			continue
		}
		var back string
		if err := json.Unmarshal([]byte(tt.want), &back); err != nil {
			t.Errorf("%s is not a JSON string: %v", tt.want, err)
		}
		want := tt.in
		if tt.back != "" {
			want = tt.back
		}
		if back != want {
			t.Errorf("%s reads back as %q, want %q", tt.want, back, want)
		}
	}

	// Invalid UTF-8 set on an envelope by hand still encodes to valid JSON.
	env := fixedEnvelope(t, "urn:a:b", nil)
	env.Job, env.Meta.Queue = "urn:\xff", "q\xfe"
	b := mustEncode(t, env)
	if !json.Valid(b) || !utf8.Valid(b) || !bytes.Contains(b, []byte("\"urn:\ufffd\"")) {
		t.Errorf("Encode with invalid UTF-8 fields: %q", b)
	}
}
