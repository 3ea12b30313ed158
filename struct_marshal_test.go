package artemis

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// marshalKinds has a field of each kind the fast path writes, with and
// without omitempty and omitzero, and the fields encoding/json skips.
type marshalKinds struct {
	S      string  `json:"s"`
	SE     string  `json:"se,omitempty"`
	SZ     string  `json:"sz,omitzero"`
	B      bool    `json:"b"`
	BE     bool    `json:"be,omitempty"`
	I      int     `json:"i"`
	IE     int64   `json:"ie,omitempty"`
	I8     int8    `json:"i8,omitzero"`
	U      uint64  `json:"u"`
	UE     uint16  `json:"ue,omitempty"`
	F      float64 `json:"f"`
	FE     float64 `json:"fe,omitempty"`
	FZ     float64 `json:"fz,omitzero"`
	F32    float32 `json:"f32"`
	F32Z   float32 `json:",omitzero"`
	Named  bindName
	Skip   string `json:"-"`
	hidden string
}

// marshalSame fails the test when the fast path writes other bytes than
// json.Marshal's output made canonical, or takes data json.Marshal
// refuses; it returns whether the fast path took data.
func marshalSame(t testing.TB, data any) bool {
	t.Helper()
	got, fast := marshalStruct(data)
	want, err := marshalJSON(data)
	// Appended after other bytes, into a buffer too short for it and into
	// one long enough: the same choice, the same bytes after them.
	for _, buf := range [][]byte{[]byte("head"), append(make([]byte, 0, 8192), "head"...)} {
		appended, ok := appendStruct(buf, data)
		if ok != fast || fast && string(appended) != "head"+string(got) {
			t.Fatalf("%+v: appended (%v) %q, alone (%v) %q", data, ok, appended, fast, got)
		}
	}
	if !fast {
		return false
	}
	if err != nil {
		t.Fatalf("%+v: the fast path wrote %s, json.Marshal refused it: %v", data, got, err)
	}
	if string(got) != string(want) {
		t.Fatalf("%+v: the fast path wrote\n%s\njson.Marshal, made canonical:\n%s", data, got, want)
	}
	return true
}

func TestMarshalStructWritesWhatMarshalWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		data any
	}{
		{"zero values", marshalKinds{}},
		{"negative zero", marshalKinds{F: math.Copysign(0, -1), FE: math.Copysign(0, -1), FZ: math.Copysign(0, -1),
			F32: float32(math.Copysign(0, -1)), F32Z: float32(math.Copysign(0, -1))}},
		{"every field set", marshalKinds{S: "a", SE: "b", SZ: "c", B: true, BE: true, I: -1, IE: math.MinInt64, I8: -128,
			U: math.MaxUint64, UE: 65535, F: 1.5, FE: -2.25, FZ: 1e300, F32: 3.4e38, F32Z: 1e-45, Named: "n", Skip: "k", hidden: "h"}},
		{"escapes json.Marshal writes and the canonical form does not", marshalKinds{S: "<a> & b \u2028 \u2029 \ufffd é ☕"}},
		{"escapes both write", marshalKinds{S: "quote \" backslash \\ nl \n cr \r tab \t bs \b ff \f nul \x00 us \x1f del \x7f"}},
		{"invalid UTF-8", marshalKinds{S: "a\xffb\xc3(\xed\xa0\x80z"}},
		{"floats at the edges of plain notation", marshalKinds{F: 1e21, FE: 999999999999999900000, FZ: 1e-6, F32: 1e21}},
		{"floats in exponent notation", marshalKinds{F: 1e-7, FE: 1.5e-300, FZ: 5e-324, F32: 1e-7, F32Z: 1e22}},
		{"float32 rounding", marshalKinds{F32: 0.1, F32Z: 16777217}},
		{"a pointer to a struct", &marshalKinds{S: "by pointer", I: 7}},
		{"the order struct", benchOrderStruct()},
		{"the 1 KB order struct", benchOrderStruct1K()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.True(t, marshalSame(t, tc.data), "fast path taken")
		})
	}
}

type (
	marshalSelf     struct{ S string }
	marshalText     struct{ S string }
	marshalTextKind struct{ T textOut }
	textOut         string
	zeroDecides     struct {
		Z zeroMethod `json:"z,omitzero"`
	}
	zeroMethod int
)

func (marshalSelf) MarshalJSON() ([]byte, error)  { return []byte(`{"by":"method"}`), nil }
func (*marshalText) MarshalText() ([]byte, error) { return []byte("text"), nil }
func (t textOut) MarshalText() ([]byte, error)    { return []byte("t:" + t), nil }
func (z zeroMethod) IsZero() bool                 { return z == 1 }

func TestMarshalStructLeavesOtherDataToMarshal(t *testing.T) {
	for _, tc := range []struct {
		name string
		data any
	}{
		{"NaN", marshalKinds{F: math.NaN()}},
		{"an infinity", marshalKinds{FE: math.Inf(-1)}},
		{"a float32 infinity", marshalKinds{F32: float32(math.Inf(1))}},
		{"a struct that encodes itself", marshalSelf{S: "x"}},
		{"a pointer that encodes itself", &marshalText{S: "x"}},
		{"a field that encodes itself", marshalTextKind{T: "x"}},
		{"omitzero asks IsZero", zeroDecides{Z: 1}},
		{"a time.Time field", bindTime{At: time.Unix(0, 0)}},
		{"an embedded struct", bindEmbedded{S: "x"}},
		{"a nil pointer", (*marshalKinds)(nil)},
		{"a map", map[string]any{"a": 1}},
		{"a pointer to a pointer", func() any { v := &marshalKinds{}; return &v }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.False(t, marshalSame(t, tc.data), "fast path taken")
			got, gotErr := marshalData(tc.data, nil)
			want, wantErr := marshalJSON(tc.data)
			assert.Equal(t, string(want), string(got))
			assert.Equal(t, wantErr, gotErr)
			scratch := []byte("left over")
			got, gotErr = marshalData(tc.data, &scratch)
			assert.Equal(t, string(want), string(got))
			assert.Equal(t, wantErr, gotErr)
			assert.Equal(t, "left over", string(scratch), "the buffer is not the result's")
		})
	}
}

func TestNewEnvelopeOfAStructTakesTheFastPath(t *testing.T) {
	data := benchOrderStruct()
	want, err := marshalJSON(data)
	require.NoError(t, err)
	env, err := NewEnvelope(benchURN, data)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(env.Data))
	allocs := testing.AllocsPerRun(50, func() { _, _ = marshalData(data, nil) })
	assert.LessOrEqual(t, allocs, 2.0, "the struct in an interface and the bytes") // json.Marshal makes more
}

// TestMarshalDataIntoScratch: struct data written into a pooled buffer is
// the bytes of its own array, in that buffer, which is kept (grown when
// short) for the next; Data ends where it does, so an append to it makes a
// copy rather than writing into the buffer; and nothing else is allocated.
func TestMarshalDataIntoScratch(t *testing.T) {
	data := any(benchOrderStruct1K())
	want, err := marshalData(data, nil)
	require.NoError(t, err)
	scratch := []byte("short")
	got, err := marshalData(data, &scratch)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	require.Equal(t, len(got), cap(got), "Data ends at its last byte")
	assert.Same(t, &scratch[0], &got[0], "written into the buffer, kept grown")

	_ = append(got, '!')
	assert.Equal(t, len(got), len(scratch), "an append to Data leaves the buffer alone")
	again, err := marshalData(data, &scratch)
	require.NoError(t, err)
	assert.Same(t, &got[0], &again[0], "the next one reuses the array")
	allocs := testing.AllocsPerRun(50, func() { _, _ = marshalData(data, &scratch) })
	assert.LessOrEqual(t, allocs, 1.0, "at most the struct in an interface: no bytes")
}

// FuzzMarshalStructMatchesMarshal: whatever a flat struct holds, the fast
// path writes json.Marshal's output made canonical, or leaves it.
func FuzzMarshalStructMatchesMarshal(f *testing.F) {
	f.Add("a", "<&>", true, int64(-1), uint64(1), 1.5, float32(2.5), 0.0)
	f.Add("", "\u2028\xff\x01", false, int64(0), uint64(0), math.Copysign(0, -1), float32(1e-7), 1e21)
	f.Add("\"\\", "é☕", true, int64(math.MinInt64), uint64(math.MaxUint64), 5e-324, float32(3.4e38), math.Inf(1))
	f.Fuzz(func(t *testing.T, s, s2 string, b bool, i int64, u uint64, x float64, y float32, z float64) {
		v := marshalKinds{S: s, SE: s2, SZ: s, B: b, BE: b, I: int(i), IE: i, I8: int8(i), U: u, UE: uint16(u),
			F: x, FE: z, FZ: x, F32: y, F32Z: y, Named: bindName(s2)}
		fast := marshalSame(t, v)
		finite := !math.IsNaN(x) && !math.IsInf(x, 0) && !math.IsNaN(z) && !math.IsInf(z, 0) &&
			!math.IsNaN(float64(y)) && !math.IsInf(float64(y), 0)
		if fast != finite {
			t.Fatalf("fast path %v for finite floats %v", fast, finite)
		}
		marshalSame(t, &v)
		var back marshalKinds
		if data, err := json.Marshal(v); err == nil {
			bindBoth(t, string(data), func() marshalKinds { return back })
		}
	})
}
