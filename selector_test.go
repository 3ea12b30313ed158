package artemis

import (
	"github.com/Azure/go-amqp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestComposeSelector(t *testing.T) {
	const urnShipped = "urn:babel:orders:shipped"
	h := Handlers{urnShipped: nil, urnCreated: nil, "urn:babel:o'brien": nil}
	const urns = "JMSType IN ('urn:babel:o''brien','urn:babel:orders:created','urn:babel:orders:shipped')"
	cases := map[string]struct {
		sel  string
		only bool
		want string
	}{
		"none":                 {"", false, ""},
		"selector":             {"bq_source_lang = 'java'", false, "bq_source_lang = 'java'"},
		"handled urns, sorted": {"", true, urns},
		"both, AND-ed":         {"region = 'eu'", true, "(" + urns + ") AND (region = 'eu')"},
		"parens in a literal":  {"note = ')('", false, "note = ')('"},
		"a doubled quote":      {"note = 'o''brien'", false, "note = 'o''brien'"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := composeSelector(tc.sel, tc.only, h)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := composeSelector("", true, Handlers{})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestRefusedSelector(t *testing.T) {
	refusal := &amqp.Error{Condition: "amqp:invalid-field", Description: "Invalid filter"}
	assert.True(t, refusedSelector(refusal, "a = = 1"))
	assert.False(t, refusedSelector(refusal, ""), "no selector was sent: some other field")
	assert.False(t, refusedSelector(&amqp.Error{Condition: "amqp:not-found"}, "a = 1"))
}

func TestFilterMismatch(t *testing.T) {
	assert.True(t, filterMismatch(&amqp.Error{Condition: amqp.ErrCondInternalError,
		Description: "Unrecoverable error: Queue: q filter mismatch [a = 2] is different than existing filter [a = 1]"}))
	assert.False(t, filterMismatch(&amqp.Error{Condition: amqp.ErrCondInternalError, Description: "something else"}))
	assert.False(t, filterMismatch(&amqp.Error{Condition: amqp.ErrCondInvalidField, Description: "filter mismatch"}))
}
