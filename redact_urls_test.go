package artemis

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
)

// TestNoFormOfThePasswordInAnyURLText dials every URL text below (well
// formed or not) through a fake go-amqp that quotes everything it was given
// in its error: the raw URL, the address, the user and the password. No
// form of the password (as written, decoded, or re-escaped) may appear in
// the returned error, any error it wraps, any event or any log line.
func TestNoFormOfThePasswordInAnyURLText(t *testing.T) {
	const pw = "SECRET"
	cases := []struct {
		url   string
		forms []string // the password as the URL writes it, and decoded
	}{
		{"amqp:babel:SECRET@host:1", nil},
		{"amqp:/babel:SECRET@host", nil},
		{"amqp//babel:SECRET@host", nil},
		{`amqps:\\babel:SECRET@host`, nil},
		{`amqps:\babel:SECRET@host`, nil},
		{"babel:SECRET@host:1", nil},
		{"amqp:///babel:SECRET@host", nil},
		{"amqp:babel:SECRET@", nil},
		{"amqp://babel:SECRET@host:1", nil},
		{"amqp://babel:SECRET@host:99x", nil},
		{"amqp://babel:SECRET@host\x7f:5672", nil},
		{"amqp://babel:SECRET@:5672", nil},
		{"amqp://babel:SECRET@", nil},
		{"amqp://babel:SECRET@@host", nil},
		{"amqp://babel:SECRET@[::1", nil},
		{"amqp://babel:SECRET@host%", nil},
		{" amqp://babel:SECRET@host", nil},
		{"http://babel:SECRET@host", nil},
		{"AMQP://babel:SECRET@host", nil},
		{"amqp+ssl://babel:SECRET@host", nil},
		{"amqp://:SECRET@host", nil},
		{"amqp://babel:SECRET@host:1/path?x=a@b#frag", nil},
		{"amqp://babel:SE%43RET@host", []string{"SE%43RET"}},
		{"amqp://babel:SE%43RET@host:99x", []string{"SE%43RET"}},
		{"amqp:babel:SE%43RET@host", []string{"SE%43RET"}},
		{"amqp://babel:SECRET%zz@host", []string{"SECRET%zz"}},
		{"amqp://babel:SEC@RET@host", []string{"SEC@RET"}},
		{"amqp://babel:SEC:RET@host", []string{"SEC:RET"}},
		{"amqp://babel:SEC/RET@host", []string{"SEC/RET"}},
		{"amqp:babel:SEC:RET@host", []string{"SEC:RET"}},
		{"amqp://babel:SEC%2FRET@host", []string{"SEC%2FRET", "SEC/RET"}},
		{"amqp://babel:SEC+RET@host", []string{"SEC+RET"}},
		{"amqp://babel:SEC%20RET@host", []string{"SEC%20RET", "SEC RET"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%q", tc.url), func(t *testing.T) {
			forms := tc.forms
			if forms == nil {
				forms = []string{pw}
			}
			var more []string
			for _, f := range forms {
				if d, err := url.PathUnescape(f); err == nil {
					more = append(more, d)
				}
				more = append(more, url.QueryEscape(f), url.PathEscape(f))
			}
			forms = append(forms, more...)

			fb := newFakeBroker(t)
			fb.dialErr = func(_ int, b *broker) error {
				return fmt.Errorf("dial %s (%q) as %s:%s: %w", b.addr, tc.url, b.user, b.pass, refused)
			}
			ev := newEvents()
			log := &fakelink.LogBuffer{}
			c, err := newClient([]string{tc.url}, &ClientOptions{
				OnEvent: ev.on,
				Logger:  slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
			}, fb.dial)
			if err == nil {
				t.Cleanup(func() { _ = c.Close() })
				_, err = c.connection(context.Background())
				require.Error(t, err, "the fake broker refuses every dial")
				assert.ErrorIs(t, err, ErrConnect)
			} else {
				assert.ErrorIs(t, err, ErrInvalidConfig)
			}
			texts := allTexts(err)
			for _, e := range ev.list() {
				texts = append(texts, e.URL)
				texts = append(texts, allTexts(e.Err)...)
			}
			texts = append(texts, log.String())
			for _, text := range texts {
				for _, f := range forms {
					if len(f) >= 3 {
						assert.NotContains(t, text, f)
					}
				}
			}
			assert.NotEmpty(t, err.Error())
			assert.True(t, strings.Contains(err.Error(), "xxxxx") || !strings.Contains(err.Error(), "babel:"),
				"the error shows where the password was: %s", err)
		})
	}
}

func TestPasswordReadings(t *testing.T) {
	cases := []struct {
		raw  string
		want []string
	}{
		{"amqp:babel:SECRET@host:1", []string{"babel:SECRET", "SECRET"}},
		{"amqp:/babel:SECRET@host", []string{"SECRET"}},
		{"amqp//babel:SECRET@host", []string{"SECRET"}},
		{`amqps:\\babel:SECRET@host`, []string{"SECRET"}},
		{"babel:SECRET@host:1", []string{"SECRET"}},
		{"amqp://u1@h:5672/", nil},
		{"amqp://h:5672", nil},
		{"no at sign: here", nil},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, passwordReadings(tc.raw), tc.raw)
	}
}
