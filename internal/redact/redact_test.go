package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"amqp://svc:pw@h:5672", "amqp://svc:xxxxx@h:5672"},
		{"amqp://babel:babel@h:5672", "amqp://xxxxx:xxxxx@h:5672"},
		{"amqp://b%61bel:babel@h:5672", "amqp://xxxxx:xxxxx@h:5672"},
		{"amqp://svc@h:5672", "amqp://svc@h:5672"},
		{"amqp://h:5672", "amqp://h:5672"},
		{"amqp://:pw@h", "amqp://:xxxxx@h"},
		{"amqp://svc:P%40ss%2Fw@h", "amqp://svc:xxxxx@h"},
		{"amqp://svc:Hq7@Wt9@h", "amqp://svc:xxxxx@h"},
		{"amqp://admin:P@ss/word1@h", "amqp://xxxxx@h"},
		{"amqp://svc:7781#tops3cret@h", "amqp://xxxxx@h"},
		{"amqp://svc:2024/Xk9+q==@h", "amqp://xxxxx@h"},
		{"amqp://svc:qz?9Lm@h", "amqp://xxxxx@h"},
		{"amqp://svc:50%off@h", "amqp://xxxxx@h"},
		{"amqp:svc:pw@h", "xxxxx@h"},
		{"svc:pw@h", "xxxxx@h"},
		{"no at sign", "no at sign"},
		{"", ""},
	}
	for _, tc := range cases {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAmbiguous(t *testing.T) {
	for raw, want := range map[string]bool{
		"amqp://svc:pw@h":             false,
		"amqp://svc:Hq7@Wt9@h":        false, // the last @ of the authority ends the userinfo
		"amqp://svc:P%40ss%2Fw@h/":    false,
		"amqp://h:1":                  false,
		"amqp://svc:50%off@h":         false, // does not parse: an error of its own
		"amqp://admin:P@ss/word1@h":   true,
		"amqp://svc:7781#tops3cret@h": true,
		"amqp://svc:12?9Lm@h":         true,
		"amqp://svc:pw@h/p?x=a@b":     true,
		"amqp:svc:pw@h":               true,
	} {
		if got := Ambiguous(raw); got != want {
			t.Errorf("Ambiguous(%q) = %v, want %v", raw, got, want)
		}
	}
}

func TestAddURLRecordsEveryReading(t *testing.T) {
	cases := []struct {
		raw  string
		text string // holds the password in some form
		keep string // must stay: not a secret
	}{
		{"amqp://svc:P%40ss%2Fw@h", "x P@ss/w y P%40ss%2Fw z", "svc"},
		{"amqp://admin:P@ss/word1@h", "lookup ss/word1 and P@ss/word1", "admin:"},
		{"amqp://svc:7781#tops3cret@h", "frag 7781#tops3cret", "svc"},
		{"amqp:svc:pw9zz@h", "svc:pw9zz", ""},
		{"amqp://svc:a+b==@h", "a+b== a%2Bb%3D%3D", "svc"},
	}
	for _, tc := range cases {
		var s Secrets
		s.AddURL(tc.raw)
		got := s.String(tc.text)
		if s.Contains(got) || strings.Count(got, Mask) == 0 {
			t.Errorf("%q: %q scrubbed to %q", tc.raw, tc.text, got)
		}
		if tc.keep != "" && s.Contains(tc.keep) {
			t.Errorf("%q: the user %q counts as a secret", tc.raw, tc.keep)
		}
	}
}

func TestOwnWordsStay(t *testing.T) {
	var s Secrets
	s.AddURL("amqp://babel:babel@h")
	if got := s.String("babelqueue: login babel failed"); got != "babelqueue: login xxxxx failed" {
		t.Errorf("got %q", got)
	}
}

// TestAPasswordThatIsAnOwnWordIsMasked: the library's own word is left
// alone only around a shorter secret found inside it (a coincidence); a
// password that is the word itself, or holds it, is masked wherever it
// shows, the word's other occurrences included, since they cannot be told
// apart.
func TestAPasswordThatIsAnOwnWordIsMasked(t *testing.T) {
	for _, tc := range []struct{ url, text, want string }{
		{"amqp://user:babelqueue@h", "dial amqp://user:babelqueue@h: refused", "dial amqp://user:xxxxx@h: refused"},
		{"amqp://user:babelqueue@h", "babelqueue: login failed", "xxxxx: login failed"},
		{"amqp://user:xbabelqueue@h", "login xbabelqueue failed", "login xxxxx failed"},
		{"amqp://user:queue@h", "babelqueue: login queue failed", "babelqueue: login xxxxx failed"},
	} {
		var s Secrets
		s.AddURL(tc.url)
		if got := s.String(tc.text); got != tc.want {
			t.Errorf("%s in %q: got %q, want %q", tc.url, tc.text, got, tc.want)
		}
	}
}
