// The envelope's trace_id and an OpenTelemetry trace id, both ways, and
// the remote parent a message without a traceparent is handled under.

package otel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// TraceIDOf maps an envelope's trace_id to an OpenTelemetry trace id, as
// the family's SDKs do: a UUID (32 hex digits, hyphens ignored) is its 16
// bytes; any other string, or the all-zero UUID, is the first 16 bytes of
// its SHA-256. The same trace_id gives the same trace id in every SDK.
func TraceIDOf(traceID string) trace.TraceID {
	var t trace.TraceID
	if h := strings.ReplaceAll(traceID, "-", ""); len(h) == 32 {
		if _, err := hex.Decode(t[:], []byte(h)); err == nil && t.IsValid() {
			return t
		}
	}
	sum := sha256.Sum256([]byte(traceID))
	copy(t[:], sum[:16])
	return t
}

// UUIDOf formats a trace id as a UUID (8-4-4-4-12 lower-case hex digits):
// the trace_id a publish in that trace gets, which TraceIDOf maps back.
func UUIDOf(t trace.TraceID) string {
	const hexd = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range t {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexd[c>>4], hexd[c&0x0f]
		j += 2
	}
	return string(b[:])
}

// spanSeed prefixes the trace_id in the hash a derived parent's span id
// is taken from; the prefix is the family's, so every SDK derives the same
// parent for one trace_id.
const spanSeed = "babelqueue-span:"

// spanIDOf is the span id of the remote parent derived from a trace_id:
// the leading 8 bytes of SHA-256(spanSeed + trace_id). An all-zero result
// (an invalid span id) has its last byte set to 1.
func spanIDOf(traceID string) (id trace.SpanID) {
	h := sha256.New()
	h.Write([]byte(spanSeed))
	h.Write([]byte(traceID))
	copy(id[:], h.Sum(nil))
	if id == (trace.SpanID{}) {
		id[len(id)-1] = 1
	}
	return id
}

// derivedParent returns ctx with the remote, sampled span context the
// family derives from a trace_id, for a message that came without a
// traceparent: a span started from it joins the trace_id's trace.
func derivedParent(ctx context.Context, traceID string) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    TraceIDOf(traceID),
		SpanID:     spanIDOf(traceID),
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
