package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"unicode"

	"github.com/ctxfs/ctxfs/abi"
)

// redacted replaces every occurrence of the API key.
const redacted = "[redacted]"

// maxMessage bounds the provider's own words quoted in an error.
const maxMessage = 1024

// statusErrno maps an HTTP status to the errno the caller acts on.
func statusErrno(code int) syscall.Errno {
	switch {
	case code == 401 || code == 403:
		return syscall.EACCES // the key is missing, wrong, or not allowed this model
	case code == 408:
		return syscall.ETIMEDOUT
	case code == 413:
		return syscall.EMSGSIZE // the request is too large, as for the socket
	case code == 429:
		return syscall.EAGAIN // rate limited: try again later
	case code >= 500:
		return syscall.EIO
	case code >= 400:
		return syscall.EINVAL // 400, 404 (unknown model), 422, …: the request or the definition
	}
	return syscall.EIO // a 1xx or 3xx is not a reply this package can use
}

// StatusErrno is statusErrno for the other readers of providers' failures
// (agent/cli, which reads the HTTP status a CLI reports), so that one
// status means one errno wherever it is met.
func StatusErrno(code int) syscall.Errno { return statusErrno(code) }

// ParseErrorBody reads an API error body as parseAPIError does: its errno
// (from its type or code; EIO when neither is known) and its words. ok is
// false when body is not an error body.
func ParseErrorBody(body []byte) (errno syscall.Errno, msg string, ok bool) {
	e, ok := parseAPIError(body)
	if !ok {
		return 0, "", false
	}
	return e.errno(), e.Error(), true
}

// typeStatus maps the error types both APIs name in error bodies and in
// error events to the status each stands for, so that an error met
// mid-stream gets the errno the same error gets as a status.
var typeStatus = map[string]int{
	"invalid_request_error": 400,
	"authentication_error":  401,
	"permission_error":      403,
	"not_found_error":       404,
	"request_too_large":     413,
	"rate_limit_error":      429,
	"rate_limit_exceeded":   429, // OpenAI's code for it
	"insufficient_quota":    429, // OpenAI answers an exhausted quota with 429
	"api_error":             500,
	"server_error":          500,
	"overloaded_error":      529,
}

// apiError is the provider's own account of a failure.
type apiError struct {
	Message, Type, Code string
}

func (e apiError) Error() string {
	s := e.Message
	if s == "" {
		s = "no message"
	}
	if t := e.Type; t != "" || e.Code != "" {
		if t == "" {
			t = e.Code
		}
		s += " (" + t + ")"
	}
	return s
}

// errno is the errno of an error event, or of a 200 reply that is an error.
func (e apiError) errno() syscall.Errno {
	for _, t := range []string{e.Type, e.Code} {
		if code, ok := typeStatus[t]; ok {
			return statusErrno(code)
		}
	}
	return syscall.EIO
}

// parseAPIError reads an error body as either API or a common gateway
// sends it: {"error":{"message","type","code"}} (OpenAI),
// {"type":"error","error":{"type","message"}} (Anthropic),
// {"error":"text"} (Ollama), {"message":"text"} or {"detail":"text"}.
func parseAPIError(body []byte) (apiError, bool) {
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &top) != nil {
		return apiError{}, false
	}
	var obj struct {
		Message, Type string
		Code          json.RawMessage
	}
	var e apiError
	switch {
	case json.Unmarshal(top.Error, &obj) == nil && obj.Message+obj.Type != "":
		e = apiError{Message: obj.Message, Type: obj.Type, Code: jsonText(obj.Code)}
	case jsonText(top.Error) != "":
		e.Message = jsonText(top.Error)
	case jsonText(top.Message) != "":
		e.Message = jsonText(top.Message)
	case jsonText(top.Detail) != "":
		e.Message = jsonText(top.Detail)
	default:
		return apiError{}, false
	}
	return e, true
}

// jsonText is a JSON string's or number's text; "" for anything else.
func jsonText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// eventError is the error an error event in the stream carries.
func eventError(data string) error {
	e, ok := parseAPIError([]byte(data))
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
