package artemis

import "testing"

// TestClaimStatusNames pins the names a store's answers print as (in errors
// and logs), and the form of a status no store should answer.
func TestClaimStatusNames(t *testing.T) {
	for s, want := range map[ClaimStatus]string{
		ClaimAcquired: "acquired",
		ClaimDone:     "done",
		ClaimBusy:     "busy",
		0:             "ClaimStatus(0)",
		ClaimBusy + 1: "ClaimStatus(4)",
	} {
		if got := s.String(); got != want {
			t.Errorf("ClaimStatus(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}
