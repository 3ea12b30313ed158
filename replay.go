package artemis

import (
	"context"
	"strings"
)

// HeaderReplayBypass is the out-of-band header (an AMQP application
// property) a redrive stamps on a deliberate replay (bqartemis redrive
// -bypass writes "true"). The envelope is unchanged.
//
// The header counts as set when its value, trimmed, is not blank and not
// "false" or "0" (case-insensitive): "true", "1", "yes" and a boolean true
// all count; an absent header, "", "false", "0" and a boolean false do not.
const HeaderReplayBypass = "bq-replay-bypass"

// IsReplay reports whether the delivery being handled is a deliberate
// replay: its HeaderReplayBypass header is set. Outside a handler it
// returns false. It reads the header only when asked, so a handler that
// never asks pays nothing.
func IsReplay(ctx context.Context) bool {
	msg := messageFromContext(ctx)
	if msg == nil {
		return false
	}
	v, ok := msg.ApplicationProperties[HeaderReplayBypass]
	if !ok {
		return false
	}
	return replaySet(propertyString(v))
}

func replaySet(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && !strings.EqualFold(v, "false") && v != "0"
}

// BypassExternalEffects runs fn, an effect outside the handler's own state
// (an e-mail, a card charge, a call to another service), unless the
// delivery is a replay (IsReplay), and returns its error. On a replay it
// returns nil without calling fn: the first run already had the effect,
// and the replay re-runs only the handler's idempotent core.
func BypassExternalEffects(ctx context.Context, fn func() error) error {
	if IsReplay(ctx) {
		return nil
	}
	return fn()
}
