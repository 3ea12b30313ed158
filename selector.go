// Broker-side selectors: the JMS selector a consumer or subscription hands
// the broker, composed from the Consumer's WithSelector and
// WithOnlyHandledURNs and checked before the attach.

package artemis

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/Azure/go-amqp"
)

// errSelectorRefused is matched by the error for a selector the broker
// refused at the attach: no later attach would take it.
var errSelectorRefused = fmt.Errorf("%w: the broker refused the selector", ErrInvalidConfig)

// maxSelectorLen bounds a selector: Artemis keeps it on every delivery's
// path, and a filter this long is a mistake (a URN list belongs in fewer
// handlers, or in several subscriptions).
const maxSelectorLen = 64 << 10

// composeSelector is the selector a consumer sends (WithSelector,
// WithOnlyHandledURNs): selector, AND-ed with the list of h's URNs when onlyHandled is set,
// checked. "" means none.
func composeSelector(selector string, onlyHandled bool, h Handlers) (string, error) {
	var parts []string
	if onlyHandled {
		if len(h) == 0 {
			return "", fmt.Errorf("%w: WithOnlyHandledURNs with a Consumer that has no handlers", ErrInvalidConfig)
		}
		parts = append(parts, urnSelector(h))
	}
	if selector != "" {
		if err := checkSelector(selector); err != nil {
			return "", err
		}
		parts = append(parts, selector)
	}
	switch len(parts) {
	case 0:
		return "", nil
	case 1:
		return parts[0], nil
	}
	return "(" + parts[0] + ") AND (" + parts[1] + ")", nil
}

// urnSelector selects the messages whose JMSType (Artemis reads it from
// properties.subject, which carries the URN) is one of h's URNs, sorted so
// the same handlers always give the same filter.
func urnSelector(h Handlers) string {
	urns := make([]string, 0, len(h))
	for urn := range h {
		urns = append(urns, "'"+strings.ReplaceAll(urn, "'", "''")+"'")
	}
	slices.Sort(urns)
	return "JMSType IN (" + strings.Join(urns, ",") + ")"
}

// checkSelector catches, before any attach, the selectors that cannot be
// right: blank, control characters, an unterminated string literal,
// unbalanced parentheses, or too long. The broker is the judge of the rest
// (refusedSelector).
func checkSelector(sel string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: selector %q: %s", ErrInvalidConfig, sel, why)
	}
	if strings.TrimSpace(sel) == "" {
		return bad("it is blank")
	}
	if len(sel) > maxSelectorLen {
		return fmt.Errorf("%w: the selector is %d bytes, over %d", ErrInvalidConfig, len(sel), maxSelectorLen)
	}
	depth, quoted := 0, false
	for _, r := range sel {
		switch {
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r == 0x7f:
			return bad("it holds a control character")
		case r == '\'':
			quoted = !quoted // a doubled '' inside a literal flips twice
		case quoted:
		case r == '(':
			depth++
		case r == ')':
			depth--
			if depth < 0 {
				return bad("a ')' closes nothing")
			}
		}
	}
	if quoted {
		return bad("a string literal is not closed")
	}
	if depth != 0 {
		return bad("a '(' is not closed")
	}
	return nil
}

// refusedSelector reports the broker's refusal of the selector at the
// attach: Artemis answers a filter it cannot parse with
// amqp:invalid-field.
func refusedSelector(err error, sel string) bool {
	var ae *amqp.Error
	return sel != "" && errors.As(err, &ae) && ae.Condition == amqp.ErrCondInvalidField
}

// filterMismatch reports Artemis's answer to an attach to an existing
// subscription queue (address::queue) with a selector other than the
// queue's filter: amqp:internal-error, "... filter mismatch [...] is
// different than existing filter [...]". Artemis closes the connection
// with it, and no later attach with the same selector would succeed.
func filterMismatch(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Condition == amqp.ErrCondInternalError && strings.Contains(ae.Description, "filter mismatch")
}
