package artemis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/babelqueue/babelqueue-go-artemis/internal/fakelink"
	"github.com/babelqueue/babelqueue-go-artemis/internal/redact/leaktest"
)

func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"amqp://babel:babel@127.0.0.1:5672", "amqp://xxxxx:xxxxx@127.0.0.1:5672"}, // the user would show the password
		{"amqps://user:p%40ss@broker.example:5671/", "amqps://user:xxxxx@broker.example:5671/"},
		{"amqp://user@broker:5672", "amqp://user@broker:5672"},
		{"amqp://broker:5672", "amqp://broker:5672"},
		{"amqp://:only-pass@broker", "amqp://:xxxxx@broker"},
		{"amqp://user:se@cr@et@host", "amqp://user:xxxxx@host"},
		// Not URLs, or read wrongly by net/url: the whole userinfo goes.
		{"amqp://user:secret@host:99x", "amqp://xxxxx@host:99x"},
		{"amqp://user:sec/ret@host:99x", "amqp://xxxxx@host:99x"},
		{"amqp://user:se@cr@et@host\x7f", "amqp://xxxxx@host\x7f"},
		{"amqp://admin:P@ss/word1@host", "amqp://xxxxx@host"},
		{"amqp://svc:7781#tops3cret@host", "amqp://xxxxx@host"},
		{"amqp://u:p@host/x?y=a@b", "amqp://xxxxx@b"},
		{"amqp:user:pass@host", "xxxxx@host"},
		{"no scheme at all", "no scheme at all"},
		{"", ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			assert.Equal(t, tc.want, redactURL(tc.in))
		})
	}
}

func TestRedactorScrubsEveryForm(t *testing.T) {
	var r redactor
	r.addURLPassword("amqp://u:p%40ss%20w%2Frd@h:5672")
	r.add("opt-secret")
	r.add("")
	for _, leak := range []string{"p%40ss%20w%2Frd", "p@ss w/rd", "p%40ss+w%2Frd", "opt-secret"} {
		s := r.string("before " + leak + " after")
		assert.Equal(t, "before xxxxx after", s, leak)
		assert.False(t, r.contains(s))
	}
	assert.Equal(t, "nothing to hide", r.string("nothing to hide"))
}

func TestRedactorMalformedURLPasswordIsASecret(t *testing.T) {
	// Parses, but not as its author meant: "12/ss" is a port and a path.
	var r redactor
	r.addURLPassword("amqp://u:12/ss@h")
	assert.NotContains(t, r.string(redactURL("amqp://u:12/ss@h")), "12/ss")
}

func TestRedactorError(t *testing.T) {
	var r redactor
	r.add("hunter2")

	clean := fmt.Errorf("dial: %w", refused)
	assert.Same(t, clean, r.error(clean), "an error without a secret is returned as it is")
	assert.Nil(t, r.error(nil))

	cases := map[string]error{
		"in the text":          errors.New("login hunter2 refused"),
		"in a wrapped error":   fmt.Errorf("dial: %w", errors.New("login hunter2 refused")),
		"in a joined error":    errors.Join(refused, errors.New("pw=hunter2")),
		"hidden by the outer":  &opaque{inner: errors.New("pw=hunter2")},
		"deep in a join chain": fmt.Errorf("a: %w", errors.Join(refused, fmt.Errorf("b: %w", errors.New("hunter2")))),
	}
	for name, err := range cases {
		t.Run(name, func(t *testing.T) {
			got := r.error(err)
			require.Error(t, got)
			for _, text := range allTexts(got) {
				assert.NotContains(t, text, "hunter2")
			}
			assert.Nil(t, errors.Unwrap(got), "the scrubbed error does not lead back to the original")
		})
	}

	var none redactor
	leaky := errors.New("hunter2")
	assert.Same(t, leaky, none.error(leaky), "with no secret known there is nothing to scrub")
}

// opaque wraps an error without showing its text.
type opaque struct{ inner error }

func (o *opaque) Error() string { return "something failed" }
func (o *opaque) Unwrap() error { return o.inner }

func TestRedactorLeavesTheLibrarysOwnWordsAlone(t *testing.T) {
	var r redactor
	r.addURLPassword("amqp://babel:babel@127.0.0.1:5672")
	r.add("queue")
	assert.Equal(t, "babelqueue: receive: amqp://xxxxx:xxxxx@127.0.0.1:5672 said xxxxx; xxxxx",
		r.string("babelqueue: receive: amqp://babel:babel@127.0.0.1:5672 said babel; queue"))
	assert.False(t, r.contains("babelqueue: cannot connect"))
	assert.True(t, r.contains("babelqueue babel"))
	assert.Equal(t, "xxxxx", r.string("babelbabel"), "adjacent occurrences merge")
}

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
				t.Cleanup(func() { _ = c.close() })
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

// TestNoPieceOfThePasswordInDialErrorsEventsOrLogs dials every URL form of
// the leak table against a loopback port that refuses and one that never
// answers, and reads Dial's error (its whole chain), every event and every
// log line: none shows a password, or any piece of one.
func TestNoPieceOfThePasswordInDialErrorsEventsOrLogs(t *testing.T) {
	ports := map[string]string{"refused": leaktest.ClosedPort(t), "silent": leaktest.SilentPort(t)}
	for _, tc := range leaktest.Cases() {
		for name, addr := range ports {
			raw := tc.URLFor(addr)
			t.Run(fmt.Sprintf("%s/%q", name, raw), func(t *testing.T) {
				t.Parallel()
				ev := newEvents()
				log := &fakelink.LogBuffer{}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c, err := Dial(ctx, []string{raw}, &ClientOptions{
					Password:    tc.EnvPassword,
					DialTimeout: 300 * time.Millisecond,
					OnEvent:     ev.on,
					Logger: slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug,
						ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
							if a.Key == slog.TimeKey {
								return slog.Attr{} // a date would match digits of a password
							}
							return a
						}})),
				})
				if err == nil {
					_ = c.Close(context.Background())
					t.Fatal("Dial succeeded against a port with no broker")
				}
				if !errors.Is(err, ErrConnect) && !errors.Is(err, ErrInvalidConfig) {
					t.Errorf("error matches neither ErrConnect nor ErrInvalidConfig: %v", err)
				}
				for _, text := range allTexts(err) {
					leaktest.Check(t, tc, "Dial's error", text)
				}
				for _, e := range ev.list() {
					leaktest.Check(t, tc, "event "+e.Kind.String()+" URL", e.URL)
					for _, text := range allTexts(e.Err) {
						leaktest.Check(t, tc, "event "+e.Kind.String()+" error", text)
					}
				}
				leaktest.Check(t, tc, "the log", log.String())
			})
		}
	}
}
