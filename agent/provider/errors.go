package provider

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"unicode"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/modelapi"
)

// redacted replaces every occurrence of the API key.
const redacted = "[redacted]"

// maxMessage bounds the provider's own words quoted in an error.
const maxMessage = 1024

// eventError is the error an error event in the stream carries.
func eventError(data string) error {
	e, ok := modelapi.ParseAPIError([]byte(data))
	if !ok {
		return malformed(fmt.Errorf("error event without an error object"))
	}
	return e
}

// malformedError is a stream that does not follow its API's format.
type malformedError struct{ err error }

func (e malformedError) Error() string { return e.err.Error() }

func malformed(err error) error { return malformedError{err} }

// transportErrno maps a failure to connect, send or read. Connection
// refused (the host answered that nothing listens on the port) is
// ECONNREFUSED. Every other failure to connect — a name that does not
// resolve, no route, network unreachable — is EHOSTUNREACH: the host itself
// could not be reached, which tells the user to check the endpoint's host
// name and the network rather than whether the server runs. A timeout
// below this package (a dial timeout, or the caller's Client.Timeout) is
// ETIMEDOUT. Anything else, such as a connection reset mid-stream or a TLS
// failure, is EIO.
func transportErrno(err error) syscall.Errno {
	var ne net.Error
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return syscall.ECONNREFUSED
	case errors.As(err, &ne) && ne.Timeout():
		return syscall.ETIMEDOUT
	case errors.As(err, &dns):
		return syscall.EHOSTUNREACH
	case errors.As(err, &op) && op.Op == "dial":
		return syscall.EHOSTUNREACH
	}
	return syscall.EIO
}

// scrub removes every occurrence of key from s.
func scrub(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, redacted)
}

// quote makes provider-supplied text fit for an error message: scrubbed of
// the key first (so that shortening cannot leave half of it), valid UTF-8,
// control characters as spaces, at most maxMessage bytes.
func quote(b []byte, key string) string {
	s := strings.ToValidUTF8(scrub(string(b), key), "\uFFFD")
	s = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s))
	return abi.Clip(s, maxMessage)
}

// redactor removes the key from text that arrives in pieces. It holds
// back the end of what it was given while that end could be the start of
// the key, so that a key split across pieces is caught too; with an
// ASCII key (Validate) what it holds back is whole characters.
type redactor struct {
	key     string
	pending string
	all     strings.Builder
}

// add takes a piece and returns what can be passed on now.
func (r *redactor) add(s string) string {
	if r.key == "" {
		r.all.WriteString(s)
		return s
	}
	p := strings.ReplaceAll(r.pending+s, r.key, redacted)
	keep := 0
	for k := min(len(r.key)-1, len(p)); k > 0; k-- {
		if strings.HasSuffix(p, r.key[:k]) {
			keep = k
			break
		}
	}
	out := p[:len(p)-keep]
	r.pending = p[len(p)-keep:]
	r.all.WriteString(out)
	return out
}

// flush returns what was held back, at the end of the stream.
func (r *redactor) flush() string {
	out := r.pending
	r.pending = ""
	r.all.WriteString(out)
	return out
}
