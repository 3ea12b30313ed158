package artemis

import (
	"context"
	"errors"
	"net/url"
	"strings"
)

// redactedPassword replaces a password wherever one would be shown, as
// net/url's URL.Redacted does.
const redactedPassword = "xxxxx"

// redactURL returns raw, as written, with the password of its userinfo
// replaced by xxxxx, so it can be printed. A string that does not parse as
// a URL is redacted generously (see userinfoPassword).
func redactURL(raw string) string {
	_, err := url.Parse(raw)
	start, end, ok := userinfoPassword(raw, err == nil)
	if !ok {
		return raw
	}
	return raw[:start] + redactedPassword + raw[end:]
}

// userinfoPassword finds the password in a URL-like string as written,
// escapes and all. For a URL that parses (exact), it splits as net/url
// does: the authority ends at the first "#", "?" or "/" after "://" and the
// userinfo at the authority's last "@". For one that does not, it assumes
// the userinfo runs to the last "@" of the string, hiding too much rather
// than too little. The password is what follows the userinfo's first colon.
func userinfoPassword(raw string, exact bool) (start, end int, ok bool) {
	scheme := strings.Index(raw, "://")
	if scheme < 0 {
		return 0, 0, false
	}
	authStart := scheme + 3
	authority := raw[authStart:]
	if i := strings.IndexAny(authority, "#?/"); exact && i >= 0 {
		authority = authority[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return 0, 0, false
	}
	colon := strings.Index(authority[:at], ":")
	if colon < 0 {
		return 0, 0, false
	}
	return authStart + colon + 1, authStart + at, true
}

// redactor scrubs known secrets out of text and errors. Every error and
// log line the Client produces goes through it, including errors returned
// by go-amqp and the net package, which may quote what they were given.
type redactor struct {
	secrets []string
}

// add records a secret. Its URL-escaped forms are recorded too, since a
// URL quoted in an error shows the password as written in the URL.
func (r *redactor) add(secret string) {
	if secret == "" {
		return
	}
	for _, s := range []string{secret, url.PathEscape(secret), url.QueryEscape(secret), url.UserPassword("", secret).String()[1:]} {
		if s == "" || s == redactedPassword {
			continue
		}
		dup := false
		for _, have := range r.secrets {
			dup = dup || have == s
		}
		if !dup {
			r.secrets = append(r.secrets, s)
		}
	}
}

// addURLPassword records the password of a broker URL as written in the
// URL and decoded. Both readings of userinfoPassword count: a malformed URL
// may parse into something its author did not mean, password in the path.
func (r *redactor) addURLPassword(raw string) {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			r.add(p)
		}
	}
	var found []string
	for _, exact := range []bool{true, false} {
		if start, end, ok := userinfoPassword(raw, exact); ok {
			found = append(found, raw[start:end])
		}
	}
	found = append(found, passwordReadings(raw)...)
	for _, p := range found {
		r.add(p)
		if d, err := url.PathUnescape(p); err == nil {
			r.add(d)
		}
		if d, err := url.QueryUnescape(p); err == nil {
			r.add(d)
		}
	}
}

// passwordReadings finds a password in URL text however it is malformed:
// "amqp:user:pass@host", "amqp:/user:pass@host", "amqp//user:pass@host",
// "amqps:\\user:pass@host", "user:pass@host" and the like. The userinfo is
// taken to run to the last "@" and the password to start after a colon:
// the first one (a scheme-less "user:pass", unless slashes follow it), and
// the first one after the scheme's colon and any slashes or backslashes
// that follow it. Reading too much hides more than the password, never
// less.
func passwordReadings(raw string) []string {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return nil
	}
	userinfo := raw[:at]
	first := strings.Index(userinfo, ":")
	if first < 0 {
		return nil
	}
	var out []string
	after := userinfo[first+1:]
	if !strings.HasPrefix(after, "/") && !strings.HasPrefix(after, `\`) {
		out = append(out, after) // "user:pass@host", or "amqp:user:pass@host" read generously
	}
	rest := strings.TrimLeft(after, "/\\")
	if i := strings.Index(rest, ":"); i >= 0 {
		out = append(out, rest[i+1:])
	}
	return out
}

// ownWords are words of the library's own messages. A secret found inside
// one of them is a coincidence (the development password "babel" is inside
// "babelqueue"), not a leak, and is left alone so messages stay readable.
var ownWords = []string{"babelqueue"}

// string returns s with every occurrence of a secret replaced by xxxxx.
func (r *redactor) string(s string) string {
	mask := r.mask(s)
	if mask == nil {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if !mask[i] {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(redactedPassword)
		for i < len(s) && mask[i] {
			i++
		}
	}
	return b.String()
}

// contains reports whether s shows a secret.
func (r *redactor) contains(s string) bool { return r.mask(s) != nil }

// mask marks the bytes of s that belong to a secret, or returns nil when
// none does.
func (r *redactor) mask(s string) []bool {
	var own [][2]int
	for _, w := range ownWords {
		for i := 0; ; {
			j := strings.Index(s[i:], w)
			if j < 0 {
				break
			}
			own = append(own, [2]int{i + j, i + j + len(w)})
			i += j + 1
		}
	}
	var mask []bool
	for _, secret := range r.secrets {
		for i := 0; ; {
			j := strings.Index(s[i:], secret)
			if j < 0 {
				break
			}
			start, end := i+j, i+j+len(secret)
			i = start + 1
			inside := false
			for _, o := range own {
				inside = inside || start >= o[0] && end <= o[1]
			}
			if inside {
				continue
			}
			if mask == nil {
				mask = make([]bool, len(s))
			}
			for k := start; k < end; k++ {
				mask[k] = true
			}
		}
	}
	return mask
}

// error returns err unchanged when neither it nor any error it wraps shows
// a secret. Otherwise it returns a *redactedError with the scrubbed text
// that does not unwrap to the original, so no chain walk can reach the
// secret either.
func (r *redactor) error(err error) error {
	if err == nil || len(r.secrets) == 0 || !r.leaks(err) {
		return err
	}
	re := &redactedError{text: r.string(err.Error())}
	for _, s := range keptSentinels {
		if errors.Is(err, s) {
			re.kinds = append(re.kinds, s)
		}
	}
	return re
}

// keptSentinels are the errors a redacted error still matches when the
// original did: their texts are the library's own and show no secret.
var keptSentinels = []error{
	ErrInvalidConfig, ErrConnect, ErrClosed, ErrOutcomeUnknown, ErrNotAccepted,
	context.Canceled, context.DeadlineExceeded,
}

// leaks walks err's tree looking for a secret in any error's text.
func (r *redactor) leaks(err error) bool {
	if err == nil {
		return false
	}
	if r.contains(err.Error()) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return r.leaks(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if r.leaks(e) {
				return true
			}
		}
	}
	return false
}

// redactedError stands in for an error whose text showed a password: it
// keeps the text with the password replaced by xxxxx, and deliberately does
// not wrap the original.
type redactedError struct {
	text  string
	kinds []error // the kept sentinels the original matched
}

// Error returns the scrubbed text.
func (e *redactedError) Error() string { return e.text }

// Unwrap returns only the library's sentinels (and context errors) the
// original matched, so errors.Is(err, ErrConnect) still holds and no chain
// walk can reach the secret.
func (e *redactedError) Unwrap() []error { return e.kinds }
