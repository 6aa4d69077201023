package proto

import (
	"encoding/json"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ctxfs/ctxfs/abi"
)

// The ops of SPEC 17.
const (
	// OpApprove answers a call waiting for a decision: run, id (the
	// call), decision, reason.
	OpApprove = "approve"
	// OpAnswer answers an ask_user question: run, id, text.
	OpAnswer = "answer"
	// OpPending lists the waiting calls the caller may answer.
	OpPending = "pending"
	// OpRestore puts files back as they were before a version or a run
	// (a recorded run of its own): id (client id), version or run, path.
	OpRestore = "restore"
)

// OpPermit is the op of a run's control socket that asks whether a CLI's
// tool use may go on (Claude Code's permission prompt, relayed by `ctxfs
// __permit`): PermitRequest. FramePermit is its reply: {"type":"permit",
// "id", "decision", "reason"?}.
const (
	OpPermit    = "permit"
	FramePermit = "permit"
)

// A request to a run's control socket is one line of at most
// MaxControlRequest bytes (a tool's input must fit the approval_request
// the engine records, one log line), sent within ControlRequestWait; a
// reply is read up to the same bound.
const (
	MaxControlRequest  = abi.MaxLineBytes - 4<<10
	ControlRequestWait = 10 * time.Second
)

// PermitRequest is op permit's fields: ID is the CLI's tool use id, Name
// its tool's name, Arguments its input.
type PermitRequest struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Bounds of the fields of the ops above.
const (
	MaxCallIDBytes = 256     // a call id is the model's: bounded, printable
	MaxReasonBytes = 4 << 10 // an approval's reason
	MaxAnswerBytes = 64 << 10
)

// The decisions an approval takes (SPEC 17).
const (
	DecisionAllowOnce = "allow_once"
	DecisionAllowRun  = "allow_run"
	DecisionDeny      = "deny"
	DecisionStop      = "stop"
)

// decisions are the decisions an approve may carry.
var decisions = map[string]bool{DecisionAllowOnce: true, DecisionAllowRun: true, DecisionDeny: true, DecisionStop: true}

// ValidDecision reports whether d is one of the decisions.
func ValidDecision(d string) bool { return decisions[d] }

// decideFields are the wire fields of the ops above.
type decideFields struct {
	Run      *string `json:"run"`
	Decision *string `json:"decision"`
	Reason   *string `json:"reason"`
	Text     *string `json:"text"`
	Version  *int64  `json:"version"`
	Path     *string `json:"path"`
}

// checkDecide checks approve and answer: a run id, a call id, and the
// decision or the text.
func (r *Request) checkDecide(w wireRequest) error {
	if w.Run == nil || !abi.IsRunID(*w.Run) {
		return abi.Errorf(syscall.EINVAL, "", "%s needs the run id of the waiting call", r.Op)
	}
	r.Run = *w.Run
	if !ValidCallID(r.ID) {
		return abi.Errorf(syscall.EINVAL, "", "%s needs the id of the waiting call", r.Op)
	}
	if r.Op == OpAnswer {
		switch {
		case w.Text == nil:
			return abi.Errorf(syscall.EINVAL, "", "answer needs a text")
		case len(*w.Text) > MaxAnswerBytes || strings.IndexByte(*w.Text, 0) >= 0 || !utf8.ValidString(*w.Text):
			return abi.Errorf(syscall.EINVAL, "", "an answer is UTF-8 text of at most %d bytes without NUL", MaxAnswerBytes)
		}
		r.Text = *w.Text
		return nil
	}
	if w.Decision == nil || !decisions[*w.Decision] {
		return abi.Errorf(syscall.EINVAL, "", "decision must be allow_once, allow_run, deny or stop")
	}
	r.Decision = *w.Decision
	if w.Reason != nil {
		if len(*w.Reason) > MaxReasonBytes || strings.IndexByte(*w.Reason, 0) >= 0 || !utf8.ValidString(*w.Reason) {
			return abi.Errorf(syscall.EINVAL, "", "a reason is UTF-8 text of at most %d bytes without NUL", MaxReasonBytes)
		}
		r.Reason = *w.Reason
	}
	return nil
}

// checkRestore checks restore: a client id, and a version or a run.
func (r *Request) checkRestore(w wireRequest) error {
	if err := abi.CheckName("client id", r.ID); err != nil {
		return err
	}
	switch {
	case (w.Version == nil) == (w.Run == nil):
		return abi.Errorf(syscall.EINVAL, "", "restore needs a version or a run, not both")
	case w.Version != nil && *w.Version <= 0:
		return abi.Errorf(syscall.EINVAL, "", "a version is a number from 1")
	case w.Run != nil && !abi.IsRunID(*w.Run):
		return abi.Errorf(syscall.EINVAL, "", "%q is not a run id", *w.Run)
	}
	if w.Version != nil {
		r.Version = *w.Version
	} else {
		r.Run = *w.Run
	}
	if w.Path != nil {
		if !strings.HasPrefix(*w.Path, "/") || strings.IndexByte(*w.Path, 0) >= 0 || len(*w.Path) > 4096 {
			return abi.Errorf(syscall.EINVAL, "", "a path to restore is absolute, without NUL")
		}
		r.Path = *w.Path
	}
	return r.checkScopeNotTemp()
}

// checkScopeNotTemp: a temp session keeps no versions.
func (r *Request) checkScopeNotTemp() error {
	if r.Scope == abi.ScopeTemp {
		return abi.Errorf(syscall.EINVAL, "", "a temp session keeps no versions")
	}
	return nil
}

// ValidCallID reports whether id can name a tool call in a request: 1 to
// MaxCallIDBytes printable ASCII bytes (ids come from the model; the
// providers' are [A-Za-z0-9_-]).
func ValidCallID(id string) bool {
	if id == "" || len(id) > MaxCallIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}
