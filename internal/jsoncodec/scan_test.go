package jsoncodec

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// skipPlainByByte is skipPlain's definition: the table, a byte at a time.
func skipPlainByByte(s string, j int) int {
	for j < len(s) && plainByte[s[j]] {
		j++
	}
	return j
}

// TestSkipPlainAgreesWithTheTable: the eight-bytes-at-a-time loop stops
// where the byte loop does, for every byte value at every position of a
// word and every start, alone and after another stopping byte (the case in
// which a borrow marks the bytes above it), and on random strings.
func TestSkipPlainAgreesWithTheTable(t *testing.T) {
	check := func(s string) {
		t.Helper()
		for j := 0; j <= len(s); j++ {
			if got, want := skipPlain(s, j), skipPlainByByte(s, j); got != want {
				t.Fatalf("skipPlain(%q, %d) = %d, want %d", s, j, got, want)
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
			skip func(string, int) int
		}{{"bytes", skipPlainByByte}, {"words", skipPlain}} {
			b.Run(fmt.Sprintf("len=%d/%s", n, impl.name), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					if impl.skip(s, 0) != n {
						b.Fatal("stopped early")
					}
				}
			})
		}
	}
}
