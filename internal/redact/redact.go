// Package redact keeps secrets out of what the library and the bqartemis
// tool print: it shows a broker URL with its credentials masked, finds the
// credentials of any URL-like text however it is written, and masks every
// recorded secret, in each of its encodings, in any text.
//
// The credentials of a URL are its userinfo: the text between the scheme's
// "://" (or the start of the text, when there is none) and the LAST "@". A
// password that holds "@", "/", "?", "#" or "%" unescaped makes net/url
// read part of it as the host, path, query or fragment; this package does
// not trust that reading. It takes everything up to the last "@" as
// userinfo, so a URL read wrongly hides more than its password, never
// less, and Ambiguous says when the two readings differ (such a URL must
// be refused before it is dialled).
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces a secret wherever one would be shown, as net/url's
// URL.Redacted does.
const Mask = "xxxxx"

// userinfo finds the userinfo of raw as written: from the scheme's "://"
// (or the start of raw) to raw's last "@".
func userinfo(raw string) (start, end int, ok bool) {
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	at := strings.LastIndex(raw[start:], "@")
	if at < 0 {
		return 0, 0, false
	}
	return start, start + at, true
}

// exact reports whether net/url reads raw's userinfo as userinfo finds it:
// raw parses, has "://", and its last "@" lies in the authority (before
// the first "/", "?" or "#" after "://").
func exact(raw string) bool {
	i := strings.Index(raw, "://")
	if i < 0 {
		return false
	}
	if _, err := url.Parse(raw); err != nil {
		return false
	}
	rest := raw[i+3:]
	at := strings.LastIndex(rest, "@")
	end := strings.IndexAny(rest, "/?#")
	return end < 0 || at < end
}

// Ambiguous reports whether raw holds an "@" that net/url does not take as
// the end of its userinfo: a user or password with an unescaped "@", "/",
// "?" or "#" (net/url then reads part of it as the host, the path, the
// query or the fragment), or an "@" in the path, query or fragment. Such a
// URL is refused: dialled, it would go to a host made of the password.
// Text that does not parse at all is not ambiguous: it is an error anyway.
func Ambiguous(raw string) bool {
	if _, err := url.Parse(raw); err != nil {
		return false
	}
	_, _, ok := userinfo(raw)
	return ok && !exact(raw)
}

// URL returns raw with its credentials masked, for printing. A URL whose
// userinfo net/url reads as written keeps its user ("amqp://svc:xxxxx@host",
// or "amqp://svc@host" when it has no password) unless the user is the
// password ("amqp://xxxxx:xxxxx@host"); any other text loses its
// whole userinfo ("amqp://xxxxx@host"), since the user cannot be told from
// the password there. Text with no "@" is returned as it is: it holds no
// credentials.
func URL(raw string) string {
	start, end, ok := userinfo(raw)
	if !ok {
		return raw
	}
	ui := raw[start:end]
	if !exact(raw) {
		return raw[:start] + Mask + raw[end:]
	}
	colon := strings.Index(ui, ":")
	if colon < 0 {
		return raw
	}
	if sameUserAndPassword(ui[:colon], ui[colon+1:]) {
		// The user would show the password: both are masked, as a
		// scrubbed text masks the password wherever it appears.
		return raw[:start] + Mask + ":" + Mask + raw[end:]
	}
	return raw[:start] + ui[:colon+1] + Mask + raw[end:]
}

// sameUserAndPassword reports whether a userinfo's user and password are
// one text once decoded (amqp://babel:babel@, the development default).
func sameUserAndPassword(user, pass string) bool {
	u, uerr := url.PathUnescape(user)
	p, perr := url.PathUnescape(pass)
	return uerr == nil && perr == nil && p != "" && u == p
}

// Secrets is a set of secrets to mask. The zero value is empty and ready.
// It is not safe for concurrent change; filled before use, it is safe for
// concurrent reading.
type Secrets struct {
	list []string
}

// Empty reports whether no secret is recorded.
func (s *Secrets) Empty() bool { return len(s.list) == 0 }

// Add records a secret with its URL-escaped forms, since a URL quoted in
// an error shows the password as written in the URL.
func (s *Secrets) Add(secret string) {
	if secret == "" {
		return
	}
	forms := []string{secret, url.PathEscape(secret), url.QueryEscape(secret), url.UserPassword("", secret).String()[1:]}
	for _, f := range forms {
		if f == "" || f == Mask {
			continue
		}
		dup := false
		for _, have := range s.list {
			dup = dup || have == f
		}
		if !dup {
			s.list = append(s.list, f)
		}
	}
}

// addDecoded records text and each of its decodings.
func (s *Secrets) addDecoded(text string) {
	s.Add(text)
	if d, err := url.PathUnescape(text); err == nil {
		s.Add(d)
	}
	if d, err := url.QueryUnescape(text); err == nil {
		s.Add(d)
	}
}

// AddURL records the credentials of raw, whatever net/url makes of it. Of a
// URL it reads as written, the password (the userinfo after its first
// colon) is the secret, as written and decoded; the user alone is not
// secret. Of any other text, the whole userinfo is, and every reading of a
// password in it: after its first colon, and after a scheme-like prefix
// ("amqp:", "amqp:/", "amqp:\\") and its first colon.
func (s *Secrets) AddURL(raw string) {
	start, end, ok := userinfo(raw)
	if !ok {
		return
	}
	ui := raw[start:end]
	if exact(raw) {
		if colon := strings.Index(ui, ":"); colon >= 0 {
			s.addDecoded(ui[colon+1:])
		}
		return
	}
	s.addDecoded(ui)
	if colon := strings.Index(ui, ":"); colon >= 0 {
		s.addDecoded(ui[colon+1:])
		rest := strings.TrimLeft(ui[colon+1:], `/\`)
		s.addDecoded(rest)
		if c2 := strings.Index(rest, ":"); c2 >= 0 {
			s.addDecoded(rest[c2+1:])
		}
	}
}

// ownWords are words of the library's own messages. A shorter secret found
// inside one of them is a coincidence (the development password "babel" is
// inside "babelqueue"), not a leak, and is left alone so messages stay
// readable. A secret that is the whole word (or holds it) is masked
// everywhere: its occurrences cannot be told from the word's.
var ownWords = []string{"babelqueue"}

// String returns text with every occurrence of a secret replaced by Mask.
// Overlapping and adjacent secrets are masked as one.
func (s *Secrets) String(text string) string {
	mask := s.mask(text)
	if mask == nil {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); {
		if !mask[i] {
			b.WriteByte(text[i])
			i++
			continue
		}
		b.WriteString(Mask)
		for i < len(text) && mask[i] {
			i++
		}
	}
	return b.String()
}

// Contains reports whether text shows a secret.
func (s *Secrets) Contains(text string) bool { return s.mask(text) != nil }

// mask marks the bytes of text that belong to a secret, or returns nil
// when none does.
func (s *Secrets) mask(text string) []bool {
	var own [][2]int
	for _, w := range ownWords {
		for i := 0; ; {
			j := strings.Index(text[i:], w)
			if j < 0 {
				break
			}
			own = append(own, [2]int{i + j, i + j + len(w)})
			i += j + 1
		}
	}
	var mask []bool
	for _, secret := range s.list {
		for i := 0; ; {
			j := strings.Index(text[i:], secret)
			if j < 0 {
				break
			}
			start, end := i+j, i+j+len(secret)
			i = start + 1
			inside := false
			for _, o := range own {
				inside = inside || start >= o[0] && end <= o[1] && end-start < o[1]-o[0]
			}
			if inside {
				continue
			}
			if mask == nil {
				mask = make([]bool, len(text))
			}
			for k := start; k < end; k++ {
				mask[k] = true
			}
		}
	}
	return mask
}
