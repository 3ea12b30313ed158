// The broker URLs: one URL as the Client dials and shows it, its
// credentials, and the connection router's redirect to another.

package artemis

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/Azure/go-amqp"

	"github.com/babelqueue/babelqueue-go-artemis/internal/redact"
)

// broker is one URL as the Client dials and shows it.
type broker struct {
	addr  string // the URL without userinfo
	shown string // the URL with its password redacted
	user  string
	pass  string
	plain bool // use SASL PLAIN with user and pass
	opts  amqp.ConnOptions
}

// parseBroker reads one broker URL; user and pass (ClientOptions.Username
// and Password), when set, replace those fields of its userinfo.
func parseBroker(raw, user, pass string) (broker, error) {
	shown := redactURL(raw)
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL, password included: never wrap it.
		return broker{}, fmt.Errorf("%w: broker URL %q does not parse (is its userinfo percent-encoded? see ClientOptions.Username)", ErrInvalidConfig, shown)
	}
	if redact.Ambiguous(raw) {
		// Dialled, it would go to a host made of part of the password.
		return broker{}, fmt.Errorf("%w: broker URL %q has an @ that does not end its userinfo: percent-encode @ / ? # %% in its userinfo (as %%40 %%2F %%3F %%23 %%25)", ErrInvalidConfig, shown)
	}
	switch u.Scheme {
	case "amqp", "amqps", "amqp+ssl":
	default:
		return broker{}, fmt.Errorf("%w: broker URL %q: scheme %q, want amqp or amqps", ErrInvalidConfig, shown, u.Scheme)
	}
	if u.Hostname() == "" {
		return broker{}, fmt.Errorf("%w: broker URL %q has no host", ErrInvalidConfig, shown)
	}
	b := broker{shown: shown}
	// Field by field: an option that is set replaces that field of the
	// URL's userinfo, and only that one.
	if u.User != nil {
		b.user = u.User.Username()
		b.pass, _ = u.User.Password()
		b.plain = true
	}
	if user != "" {
		b.user, b.plain = user, true
	}
	if pass != "" {
		b.pass, b.plain = pass, true
	}
	bare := *u
	bare.User = nil
	b.addr = bare.String()
	return b, nil
}

// maxRedirects is how many amqp:connection:redirect answers one connection
// attempt follows.
const maxRedirects = 3

// conditionRedirect is the AMQP error condition of a connection router's
// answer (an Artemis acceptor with router=...).
const conditionRedirect amqp.ErrCond = "amqp:connection:redirect"

// redirectOf returns the host:port that a redirect error names (its info
// network-host, else hostname, and port).
func redirectOf(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var remote *amqp.Error
	var ce *amqp.ConnError
	switch {
	case errors.As(err, &ce) && ce.RemoteErr != nil:
		remote = ce.RemoteErr
	case errors.As(err, &remote):
	default:
		return "", false
	}
	if remote.Condition != conditionRedirect {
		return "", false
	}
	host, _ := remote.Info["network-host"].(string)
	if host == "" {
		host, _ = remote.Info["hostname"].(string)
	}
	var port int64
	switch p := remote.Info["port"].(type) {
	case int32:
		port = int64(p)
	case int64:
		port = p
	case uint16:
		port = int64(p)
	case uint32:
		port = int64(p)
	case int:
		port = int64(p)
	}
	if host == "" || port <= 0 || port > 65535 {
		return "", false
	}
	return net.JoinHostPort(host, strconv.FormatInt(port, 10)), true
}

// redirected is b with its host and port replaced by hostPort.
func (b *broker) redirected(hostPort string) (broker, error) {
	nb := *b
	for _, s := range []*string{&nb.addr, &nb.shown} {
		u, err := url.Parse(*s)
		if err != nil {
			return broker{}, fmt.Errorf("%w: broker URL does not parse", ErrInvalidConfig)
		}
		u.Host = hostPort
		*s = u.String()
	}
	return nb, nil
}
