package otel

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// The vectors are the family's formula computed by Python's hashlib
// (hashlib.sha256(s).hexdigest()[:32] and of "babelqueue-span:" + s [:16]),
// so a Go and a Python consumer of one message derive the same parent.
func TestTraceIDOfFollowsTheFamily(t *testing.T) {
	for _, tc := range []struct {
		traceID, want, span string
	}{
		{"7b3f9c2a-e41d-4f88-9b2a-1c0d5e6f7a8b", "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b", "980c512d6f4a8fba"},
		{"7B3F9C2AE41D4F889B2A1C0D5E6F7A8B", "7b3f9c2ae41d4f889b2a1c0d5e6f7a8b", ""},
		{"order-1042", "bff83cdfb94d8087b6fd49cb20c427dc", "af8fc63f9549a49d"},
		// 32 characters that are not hex, and the all-zero UUID: hashed.
		{"zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", "", ""},
		{"00000000-0000-0000-0000-000000000000", "", ""},
	} {
		got := TraceIDOf(tc.traceID)
		if !got.IsValid() {
			t.Errorf("TraceIDOf(%q) = %s, not valid", tc.traceID, got)
		}
		if tc.want != "" && got.String() != tc.want {
			t.Errorf("TraceIDOf(%q) = %s, want %s", tc.traceID, got, tc.want)
		}
		if tc.want == "" && got.String()[:8] == tc.traceID[:8] {
			t.Errorf("TraceIDOf(%q) = %s: want the hash, not the characters", tc.traceID, got)
		}
		if tc.span != "" {
			if s := spanIDOf(tc.traceID); s.String() != tc.span {
				t.Errorf("spanIDOf(%q) = %s, want %s", tc.traceID, s, tc.span)
			}
		}
	}
}

func TestUUIDOfRoundTrips(t *testing.T) {
	id, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	u := UUIDOf(id)
	if u != "0af76519-16cd-43dd-8448-eb211c80319c" {
		t.Fatalf("UUIDOf = %q", u)
	}
	if back := TraceIDOf(u); back != id {
		t.Fatalf("TraceIDOf(UUIDOf(x)) = %s, want %s", back, id)
	}
}

func TestDerivedParentIsRemoteAndSampled(t *testing.T) {
	sc := trace.SpanContextFromContext(derivedParent(context.Background(), "order-1042"))
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("derived parent %+v: want valid, remote, sampled", sc)
	}
	if sc.TraceID().String() != "bff83cdfb94d8087b6fd49cb20c427dc" || sc.SpanID().String() != "af8fc63f9549a49d" {
		t.Fatalf("derived parent trace %s span %s", sc.TraceID(), sc.SpanID())
	}
}
