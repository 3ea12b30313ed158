package jsoncodec

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// appendStringByRune is AppendString's definition: a byte at a time, each
// non-ASCII rune decoded where it starts, an invalid byte written U+FFFD.
func appendStringByRune(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c == '\t':
			b = append(b, `\t`...)
		case c == '\b':
			b = append(b, `\b`...)
		case c == '\f':
			b = append(b, `\f`...)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', HexDigits[c>>4], HexDigits[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}

// TestAppendStringAgreesWithItsDefinition: copying plain runs whole writes
// what the byte-at-a-time definition does, for every byte value at every
// place in ASCII and non-ASCII text, and on random strings of escapes,
// valid and invalid UTF-8.
func TestAppendStringAgreesWithItsDefinition(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := string(AppendString([]byte("p:"), s)), string(appendStringByRune([]byte("p:"), s)); got != want {
			t.Fatalf("AppendString(%q) = %q, want %q", s, got, want)
		}
	}
	for b := 0; b < 256; b++ {
		for p := 0; p < 19; p++ {
			buf := []byte("abcdéfghijklmnopq")
			buf[p%len(buf)] = byte(b)
			check(string(buf))
			buf = []byte("☕☕☕☕☕☕☕")
			buf[p] = byte(b)
			check(string(buf))
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"a", "bcdefghij", " ", `"`, `\`, "\n", "\x00", "\x1f", "\x7f", "é", "☕", "\U0001F600", "\u2028", "\xc3", "\xe2\x98", "\x80", "\xff", "\xed\xa0\x80"}
	for range 20000 {
		var sb strings.Builder
		for range rng.IntN(24) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		check(sb.String())
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
		got := string(AppendString([]byte("prefix:"), tt.in))
		if got != "prefix:"+tt.want {
			t.Errorf("AppendString(%q) = %s, want %s", tt.in, got, tt.want)
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
}

// The escapes case pins each canonical choice on its own.
func TestReencodeStringChoices(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"caf\u00e9"`, `"café"`},
		{`"caf\u00E9"`, `"café"`},
		{`"a\/b"`, `"a/b"`},
		{`"\u003c\u003e\u0026"`, `"<>&"`},
		{`"\u0022\""`, `"\"\""`},
		{`"\u005c\\"`, `"\\\\"`},
		{`"\u0008\u0009\u000a\u000c\u000d"`, `"\b\t\n\f\r"`},
		{`"\u0000\u001F\u000B"`, `"\u0000\u001f\u000b"`},
		{`"\u007f"`, "\"\x7f\""},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\ud800"`, `"` + "\ufffd" + `"`},
		{`"\udc00\ud83d"`, `"` + "\ufffd\ufffd" + `"`},
		{`"\ud83d\u0041"`, `"` + "\ufffdA" + `"`},
		{`"\u2028\u2029"`, "\"\u2028\u2029\""},
		{`"plain"`, `"plain"`},
	} {
		got := string(AppendCanonical(nil, tc.in))
		if got != tc.want {
			t.Errorf("canonical %s = %s, want %s", tc.in, got, tc.want)
		}
		// encoding/json reads the same text from both.
		var a, b string
		if err := json.Unmarshal([]byte(tc.in), &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(got), &b); err != nil || a != b {
			t.Errorf("%s and %s differ to encoding/json: %q %q %v", tc.in, got, a, b, err)
		}
		// The canonical string is what AppendString writes for that text.
		if w := string(AppendString(nil, a)); w != got {
			t.Errorf("AppendString(%q) = %s, the re-encode %s", a, w, got)
		}
	}
}

func TestCheckMemberDepth(t *testing.T) {
	nest := func(open, close string, n int) string { // n levels, then innermost
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	objects := func(n int) string { // an object n levels deep
		return strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)
	}
	// Brackets in strings (escaped quotes among them) do not count; the
	// padding makes each value long enough to be scanned.
	pad := `{"s":"` + strings.Repeat(`[{\"`, 5000) + `","v":`
	for _, tc := range []struct {
		name string
		s    string
		ok   bool
	}{
		{"objects at the limit", objects(MaxMemberDepth), true},
		{"objects one deeper", objects(MaxMemberDepth + 1), false},
		{"arrays at the limit", "{\"a\":" + nest("[", "]", MaxMemberDepth-1) + "}", true},
		{"arrays one deeper", "{\"a\":" + nest("[", "]", MaxMemberDepth) + "}", false},
		{"brackets in strings", pad + nest("[", "]", 10) + "}", true},
	} {
		err := CheckMemberDepth(tc.s)
		if tc.ok != (err == nil) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !json.Valid([]byte(tc.s)) {
			t.Errorf("%s: not valid JSON", tc.name)
		}
	}
}

// BenchmarkAppendString compares AppendString with its byte-at-a-time
// definition (appendStringByRune) on the strings an envelope writes: a URN,
// a UUID, a timestamp, and a 256-byte text, ASCII and not.
func BenchmarkAppendString(b *testing.B) {
	for _, tc := range []struct{ name, s string }{
		{"urn", "urn:babel:orders:order-created"},
		{"uuid", "0b8f6c1e-3f5a-4c2d-9e7b-1a2b3c4d5e6f"},
		{"time", "2026-12-03T18:49:15.457Z"},
		{"text-256", strings.Repeat("order 1042 shipped ", 14)[:256]},
		{"text-256-nonascii", strings.Repeat("café ☕ ", 29)[:256]},
	} {
		for _, impl := range []struct {
			name   string
			append func([]byte, string) []byte
		}{{"bytes", appendStringByRune}, {"runs", AppendString}} {
			b.Run(tc.name+"/"+impl.name, func(b *testing.B) {
				buf := make([]byte, 0, 2*len(tc.s)+2)
				b.SetBytes(int64(len(tc.s)))
				for b.Loop() {
					buf = impl.append(buf[:0], tc.s)
				}
			})
		}
	}
}
