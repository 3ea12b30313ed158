package artemis

import (
	"context"
	"errors"

	"github.com/babelqueue/babelqueue-go-artemis/internal/redact"
)

// redactURL returns raw, as written, with its credentials masked, so it
// can be printed: the password of a URL that parses as written, the whole
// userinfo (everything up to the last "@") of any other text. The rules
// are internal/redact's, which the bqartemis tool shares.
func redactURL(raw string) string { return redact.URL(raw) }

// redactor scrubs known secrets out of text and errors. Every error and
// log line the Client produces goes through it, including errors returned
// by go-amqp and the net package, which may quote what they were given.
type redactor struct {
	secrets redact.Secrets
}

// add records a secret, with its URL-escaped forms.
func (r *redactor) add(secret string) { r.secrets.Add(secret) }

// addURLPassword records the credentials of a broker URL however it is
// written (see redact.Secrets.AddURL): the password of a URL that parses
// as written, the whole userinfo and every reading of a password in it
// otherwise.
func (r *redactor) addURLPassword(raw string) { r.secrets.AddURL(raw) }

// string returns s with every occurrence of a secret replaced by xxxxx.
func (r *redactor) string(s string) string { return r.secrets.String(s) }

// contains reports whether s shows a secret.
func (r *redactor) contains(s string) bool { return r.secrets.Contains(s) }

// error returns err unchanged when neither it nor any error it wraps shows
// a secret. Otherwise it returns a *redactedError with the scrubbed text
// that does not unwrap to the original, so no chain walk can reach the
// secret either.
func (r *redactor) error(err error) error {
	if err == nil || r.secrets.Empty() || !r.leaks(err) {
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
