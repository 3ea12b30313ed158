package artemis

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scanValid is the fast path's verdict on a whole JSON text.
func scanValid(s string) bool {
	end, _, ok := scanValue(s, skipSpace(s, 0), 0)
	return ok && skipSpace(s, end) == len(s)
}

// nesting returns the deepest nesting of objects and arrays in s, counting
// brackets outside strings (s need not be valid).
func nesting(s string) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

func checkFastDecode(t *testing.T, s string) {
	t.Helper()
	want := utf8.ValidString(s) && json.Valid([]byte(s))
	shallow := nesting(s) < maxScanDepth
	if got := scanValid(s); got != want && (got || shallow) {
		t.Fatalf("scanValue says valid=%t, utf8+encoding/json say %t: %q", got, want, s)
	}
	fast, ok := decodeFast(s, true)
	checked, err := decodeChecked(s, true)
	switch {
	case ok && err != nil:
		t.Fatalf("the fast path decoded a body the checked path refuses (%v): %q", err, s)
	case ok:
		require.Equal(t, checked, fast, "the paths decode %q differently", s)
	case err == nil && shallow:
		t.Fatalf("the fast path refused a body the checked path decodes: %q", s)
	}
}

func TestFastDecodeMatchesChecked(t *testing.T) {
	for _, s := range scanSeeds {
		checkFastDecode(t, s)
	}
	// Deeper than the fast path goes: decoded by the checked path all the same.
	deep := `{"job":"urn:x","trace_id":"t","data":{"d":` + strings.Repeat("[", maxScanDepth+5) + strings.Repeat("]", maxScanDepth+5) +
		`},"meta":{"schema_version":1},"attempts":0}`
	_, ok := decodeFast(deep, true)
	assert.False(t, ok, "the fast path stops at its depth limit")
	env, err := Decode([]byte(deep))
	require.NoError(t, err)
	require.NoError(t, env.Validate())
	checkFastDecode(t, deep)

	// Random edits of the seeds, with the bytes that matter to a JSON scanner.
	const alphabet = "{}[]\":,\\ \t\n0123456789-+.eEtrufalsn\x00\x1f\x7f\xc3\xa9\xed\xa0\x80\xff"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := []byte(scanSeeds[rng.IntN(5)])
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(b) + 1)
			c := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(3) {
			case 0: // insert
				b = append(b[:i], append([]byte{c}, b[i:]...)...)
			case 1: // replace
				if i < len(b) {
					b[i] = c
				}
			default: // delete
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			}
		}
		checkFastDecode(t, string(b))
	}
}

// FuzzFastDecodeMatchesChecked runs the same comparison on fuzzed bodies:
//
//	go test -run '^$' -fuzz '^FuzzFastDecodeMatchesChecked$' -fuzztime 1m -parallel 1 .
func FuzzFastDecodeMatchesChecked(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, string(body))
	})
}

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

// TestSkipValueEnds: skipValue and skipString on the shapes eachMember can
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
		got, err := unquote(tc.q)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("unquote(%s): error %v, want one saying %q", tc.q, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("unquote(%s) = %q, %v; want %q", tc.q, got, err, tc.want)
		}
	}
}

func TestIsJSONObject(t *testing.T) {
	for s, want := range map[string]bool{
		`{}`: true, " \t\r\n{\"a\":1}": true, `[]`: false, ` "x"`: false, ``: false, "  ": false,
	} {
		if got := isJSONObject([]byte(s)); got != want {
			t.Errorf("isJSONObject(%q) = %v, want %v", s, got, want)
		}
	}
}
