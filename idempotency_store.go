// The idempotency store's contract: IdempotencyStore and the Claim it
// answers with. MemoryStore implements it here; the PostgreSQL module
// implements it beside the library; Idempotent uses it.

package artemis

import (
	"context"
	"fmt"
	"time"
)

// IdempotencyStore remembers which meta.ids were processed, so Idempotent
// can collapse at-least-once delivery into one effect per message. The key
// is meta.id verbatim.
//
// A store holds, per id, one of three states: absent, claimed (a handler is
// running it: a holder's token and a lease), or done. Its methods must be
// safe for concurrent use, by goroutines and, for a shared store, by
// processes, and each must be atomic on its id:
//
//   - Claim takes the id for the caller when it is absent, or claimed with
//     an expired lease (its holder died or hung), returning ClaimAcquired
//     and a fresh token; the claim lasts lease from now. When the id is done
//     it returns ClaimDone, unless replay is true: then it claims the id as
//     if it were absent, remembering that it was done. When another
//     holder's lease is live it returns ClaimBusy and changes nothing. Two
//     concurrent Claims of one id never both return ClaimAcquired while the
//     first claim's lease lasts.
//   - Complete records that the claimed id was processed: the id becomes
//     done, whatever state it is in (the effect happened, even if the claim
//     had expired and been taken over meanwhile).
//   - Release gives up a claim after a failure: when the id is still
//     claimed with c's token it goes back to absent, or to done if it was
//     done when the claim was taken (a failed replay); otherwise (the claim
//     expired and someone else holds it, or it is gone) it changes nothing.
//   - Forget removes the id, whatever its state, so its next delivery runs
//     again.
//
// A store may forget a done id on its own after a retention it documents;
// a duplicate delivered after that runs again.
type IdempotencyStore interface {
	Claim(ctx context.Context, id string, lease time.Duration, replay bool) (Claim, error)
	Complete(ctx context.Context, c Claim) error
	Release(ctx context.Context, c Claim) error
	Forget(ctx context.Context, id string) error
}

// Claim is the answer of IdempotencyStore.Claim.
type Claim struct {
	// ID is the meta.id that was claimed.
	ID string
	// Status says whether the caller holds the claim.
	Status ClaimStatus
	// Token identifies the holder's claim when Status is ClaimAcquired; a
	// store chooses its form. It is "" otherwise.
	Token string
}

// ClaimStatus is the outcome of a claim.
type ClaimStatus int

// The claim outcomes.
const (
	// ClaimAcquired: the caller holds the id; it runs the handler, then
	// calls Complete on success or Release on failure.
	ClaimAcquired ClaimStatus = iota + 1
	// ClaimDone: the id was already processed; the delivery is skipped.
	ClaimDone
	// ClaimBusy: another holder's claim on the id is live.
	ClaimBusy
)

// String returns the status's name: acquired, done or busy.
func (s ClaimStatus) String() string {
	switch s {
	case ClaimAcquired:
		return "acquired"
	case ClaimDone:
		return "done"
	case ClaimBusy:
		return "busy"
	}
	return fmt.Sprintf("ClaimStatus(%d)", int(s))
}
