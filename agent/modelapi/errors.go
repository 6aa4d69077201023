package modelapi

import (
	"encoding/json"
	"syscall"
)

// StatusErrno maps an HTTP status to the errno the caller acts on,
// wherever a provider's status is met (a model API's reply, the status a
// coding-agent CLI reports), so that one status means one errno.
func StatusErrno(code int) syscall.Errno {
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

// APIError is the provider's own account of a failure, as its error
// body or error event gives it.
type APIError struct {
	Message, Type, Code string
}

func (e APIError) Error() string {
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

// Errno is the errno of an error event, or of a 200 reply that is an error.
func (e APIError) Errno() syscall.Errno {
	for _, t := range []string{e.Type, e.Code} {
		if code, ok := typeStatus[t]; ok {
			return StatusErrno(code)
		}
	}
	return syscall.EIO
}

// ParseAPIError reads an error body (or an error event's data) as either
// API or a common gateway sends it: {"error":{"message","type","code"}}
// (OpenAI), {"type":"error","error":{"type","message"}} (Anthropic),
// {"error":"text"} (Ollama), {"message":"text"} or {"detail":"text"}.
func ParseAPIError(body []byte) (APIError, bool) {
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &top) != nil {
		return APIError{}, false
	}
	var obj struct {
		Message, Type string
		Code          json.RawMessage
	}
	var e APIError
	switch {
	case json.Unmarshal(top.Error, &obj) == nil && obj.Message+obj.Type != "":
		e = APIError{Message: obj.Message, Type: obj.Type, Code: jsonText(obj.Code)}
	case jsonText(top.Error) != "":
		e.Message = jsonText(top.Error)
	case jsonText(top.Message) != "":
		e.Message = jsonText(top.Message)
	case jsonText(top.Detail) != "":
		e.Message = jsonText(top.Detail)
	default:
		return APIError{}, false
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
