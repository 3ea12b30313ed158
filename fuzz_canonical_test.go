package artemis

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzCanonicalReencode: for any body that Decode takes, the re-encode is
// canonical (an independent writer over encoding/json's tokens reproduces
// it), idempotent (Encode(Decode(Encode(Decode(x)))) == Encode(Decode(x)))
// and JSON-equivalent to the input where it carries the input's values
// (data, the unknown members at the top level and in meta), with identical
// number literals.
func FuzzCanonicalReencode(f *testing.F) {
	for _, tc := range reencodeCases {
		if len(tc.body) < 4096 {
			f.Add([]byte(tc.body))
		}
	}
	for _, tc := range conformanceCases {
		if b, err := os.ReadFile(filepath.Join("testdata", "conformance", tc.name+".json")); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(contractExample))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := Decode(body)
		if err != nil {
			return
		}
		out, err := env.Encode()
		if err != nil {
			// Decode does not validate: data may be an array, a string...
			if !errors.Is(err, ErrInvalidEnvelope) || isJSONObject(env.Data) {
				t.Fatalf("Encode after Decode: %v (data %s)", err, env.Data)
			}
			return
		}
		checkCanonicalReencode(t, body, out)
	})
}
