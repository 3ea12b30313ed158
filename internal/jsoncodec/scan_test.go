package jsoncodec

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// skipPlainByByte is skipPlain's definition: the table, a byte at a time.
func skipPlainByByte(s string, j int) (int, bool) {
	high := false
	for j < len(s) && plainByte[s[j]] {
		high = high || s[j] >= utf8.RuneSelf
		j++
	}
	return j, high
}

// scanStringByRune is scanString's definition: JSON's string grammar read a
// byte or a rune at a time, each non-ASCII rune decoded where it starts.
func scanStringByRune(s string, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(s); {
		switch c := s[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			escaped = true
			if j+1 >= len(s) {
				return 0, false, false
			}
			switch s[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(s) || !isHex4(s[j+2:j+6]) {
					return 0, false, false
				}
				j += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRuneInString(s[j:])
			if r == utf8.RuneError && size == 1 {
				return 0, false, false
			}
			j += size
		}
	}
	return 0, false, false
}

// TestScanStringAgreesWithItsDefinition: checking the UTF-8 of a whole
// string at its closing quote accepts and rejects exactly what decoding each
// rune where it starts does, on every byte at every place in a string, on
// sequences cut by a quote, an escape or the end, and on random strings.
func TestScanStringAgreesWithItsDefinition(t *testing.T) {
	check := func(s string) {
		t.Helper()
		gotEnd, gotEsc, gotOK := scanString(s, 0)
		wantEnd, wantEsc, wantOK := scanStringByRune(s, 0)
		if gotEnd != wantEnd || gotEsc != wantEsc || gotOK != wantOK {
			t.Fatalf("scanString(%q) = %d, %v, %v; want %d, %v, %v", s, gotEnd, gotEsc, gotOK, wantEnd, wantEsc, wantOK)
		}
	}
	for _, s := range []string{
		`"café ☕"`, `"café ☕`, "\"\xc3\"", "\"\xe2\x98\"", "\"\xe2\x98\\n\"", "\"\xed\xa0\x80\"",
		"\"\xf4\x90\x80\x80\"", "\"\xc0\xaf\"", `"\u00e9 \" \\"`, `"\u00g9"`, "\"a\x00\"", "\"\x7f\"", `""`, `"`,
	} {
		check(s)
	}
	for b := 0; b < 256; b++ {
		for p := 1; p < 19; p++ {
			buf := []byte(`"abcdéfghijklmnopq"`)
			buf[p] = byte(b)
			check(string(buf))
			buf = []byte(`"☕☕☕☕☕☕☕"`)
			buf[p] = byte(b)
			check(string(buf))
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", " ", `"`, `\`, `\n`, `\u00e9`, "\x00", "\x1f", "\x7f", "é", "☕", "\U0001F600", "\xc3", "\xe2\x98", "\x80", "\xff", "\xed\xa0\x80"}
	for range 20000 {
		var sb strings.Builder
		sb.WriteByte('"')
		for range rng.IntN(24) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		if rng.IntN(8) != 0 {
			sb.WriteByte('"')
		}
		check(sb.String())
	}
}

// TestSkipPlainAgreesWithTheTable: the eight-bytes-at-a-time loop stops
// where the byte loop does, for every byte value at every position of a
// word and every start, alone and after another stopping byte (the case in
// which a borrow marks the bytes above it), and on random strings.
func TestSkipPlainAgreesWithTheTable(t *testing.T) {
	check := func(s string) {
		t.Helper()
		for j := 0; j <= len(s); j++ {
			got, gotHigh := skipPlain(s, j)
			want, wantHigh := skipPlainByByte(s, j)
			if got != want || gotHigh != wantHigh {
				t.Fatalf("skipPlain(%q, %d) = %d, %v; want %d, %v", s, j, got, gotHigh, want, wantHigh)
			}
		}
	}
	for b := 0; b < 256; b++ {
		for p := 0; p < 19; p++ {
			buf := []byte("abcdefghijklmnopqrstu")
			buf[p] = byte(b)
			check(string(buf))
			for _, before := range []byte{0x00, 0x1f, '"', '\\', 0x80, 0xff} {
				if p > 0 {
					buf[p-1] = before
					check(string(buf))
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab \"\\\x00\x1f\x20\x21\x5b\x5d\x7f\x80\xc3\xa9\xff")
	for range 2000 {
		buf := make([]byte, rng.IntN(40))
		for i := range buf {
			if rng.IntN(4) == 0 {
				buf[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				buf[i] = byte('a' + rng.IntN(26))
			}
		}
		check(string(buf))
	}
}

// TestSkipValueEnds: skipValue and skipString on the shapes EachMember can
// meet, including the ends they never reach on valid JSON (an unterminated
// string or container stops at the end, never past it).
func TestSkipValueEnds(t *testing.T) {
	for _, tc := range []struct {
		s    string
		i    int
		want int
	}{
		{`"abc",`, 0, 5},
		{`"a\"b"}`, 0, 6},
		{`"unterminated`, 0, 13},
		{`{"a":[1,{"b":"}"}]},`, 0, 19},
		{`[1,2`, 0, 4},
		{`12.5e3}`, 0, 6},
		{`true`, 0, 4},
		{`null ,`, 0, 4},
		{`1`, 1, 1},
		{``, 0, 0},
	} {
		if got := skipValue(tc.s, tc.i); got != tc.want {
			t.Errorf("skipValue(%q, %d) = %d, want %d", tc.s, tc.i, got, tc.want)
		}
	}
}

func TestUnquote(t *testing.T) {
	for _, tc := range []struct{ q, want, err string }{
		{`"plain"`, "plain", ""},
		{`""`, "", ""},
		{`"caf\u00e9 \"q\" \\ \n"`, "café \"q\" \\ \n", ""},
		{`plain`, "", "not a JSON string: plain"},
		{`"`, "", "not a JSON string"},
		{`"bad \x"`, "", "invalid character 'x' in string escape code"},
	} {
		got, err := Unquote(tc.q)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Unquote(%s): error %v, want one saying %q", tc.q, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Unquote(%s) = %q, %v; want %q", tc.q, got, err, tc.want)
		}
	}
}

func TestIsJSONObject(t *testing.T) {
	for s, want := range map[string]bool{
		`{}`: true, " \t\r\n{\"a\":1}": true, `[]`: false, ` "x"`: false, ``: false, "  ": false,
	} {
		if got := IsObject([]byte(s)); got != want {
			t.Errorf("IsObject(%q) = %v, want %v", s, got, want)
		}
	}
}

// BenchmarkSkipPlain compares the scanner's word loop with the byte loop it
// replaced (skipPlainByByte, the definition) on string bodies of the
// lengths an envelope holds: a short key, a UUID, a long text.
func BenchmarkSkipPlain(b *testing.B) {
	for _, n := range []int{4, 36, 256} {
		s := strings.Repeat("order-1042 ", n/11+1)[:n] + `"`
		for _, impl := range []struct {
			name string
			skip func(string, int) (int, bool)
		}{{"bytes", skipPlainByByte}, {"words", skipPlain}} {
			b.Run(fmt.Sprintf("len=%d/%s", n, impl.name), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					if end, _ := impl.skip(s, 0); end != n {
						b.Fatal("stopped early")
					}
				}
			})
		}
	}
}

// TestTruncateCutsAtARuneBoundary: an error's shortened text never ends
// inside a multi-byte UTF-8 sequence.
func TestTruncateCutsAtARuneBoundary(t *testing.T) {
	for pad := 36; pad <= 40; pad++ {
		s := strings.Repeat("a", pad) + "é€𝄞 and more text"
		got := truncate(s)
		if !utf8.ValidString(got) || !strings.HasSuffix(got, "...") || !strings.HasPrefix(s, strings.TrimSuffix(got, "...")) {
			t.Errorf("truncate(%q) = %q", s, got)
		}
	}
}
