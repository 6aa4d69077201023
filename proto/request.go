package proto

import (
	"bytes"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Ops.
const (
	OpSend   = "send"
	OpCancel = "cancel"
	OpStatus = "status"
	OpResume = "resume"
	OpPing   = "ping"
	// OpSearch searches the user and assistant text of the sessions of
	// the caller's home or space at this agent or model (SPEC 14).
	OpSearch = "search"
	// OpArchive archives the named session, or deletes it with "delete":
	// true (SPEC 12; ctx agent session archive and gc); with "archived":
	// true as well, it deletes the archived session of that name
	// (ctx agent session delete-archived).
	OpArchive = "archive"
	// OpImport makes a new session from a coding-agent CLI's session
	// (SPEC 16, ctx agent import): the request line is followed by the
	// messages on the same connection (package session/importer).
	OpImport = "import"
)

// Request is a parsed, well-formed request. Session is "default" when the
// request named none (SessionGiven tells which), Scope "private" likewise.
type Request struct {
	Op           string
	ID           string // client id (send) or run/client id (cancel)
	Session      string
	SessionGiven bool
	Scope        string
	ScopeGiven   bool
	Space        string
	Cwd          string // "" when not given
	Input        string
	After        string   // resume: run id, "" when not given
	Query        string   // search: the text to find
	Delete       bool     // archive: delete instead
	DryRun       bool     // archive: only say whether it would be taken
	Archived     bool     // archive: of an archived session, to delete or look for
	HomeUid      *uint32  // archive of an archived session: in this uid's home (root only), nil for the caller's
	Sessions     []string // archivable: the sessions to check, in order
	Run          string   // approve, answer: the run of the waiting call; restore: the run to undo
	Decision     string   // approve
	Reason       string   // approve, optional
	Text         string   // answer
	Version      int64    // restore: the version to put back, 0 when a run is named
	Path         string   // restore: only this file, "" for all
	// Parent is the run that starts this send as its child (agent.create,
	// SPEC 18): set by the engine alone, never read from a request line.
	Parent string
	// ParentSession is that run's session directory, store-relative (""
	// for a temp session): a restart marks the child's end there.
	ParentSession string
	// Line is the request line as its writer wrote it, kept by a
	// transport that owns the bytes (a ctl file, fs/ctl.go) so that a
	// host that does not write the store can relay the request whole to
	// the host that does (cluster/replica.Relay); nil from ParseRequest.
	Line []byte
}

// wireRequest is the JSON shape; pointers tell "missing" from "empty".
type wireRequest struct {
	Op      *string `json:"op"`
	ID      *string `json:"id"`
	Session *string `json:"session"`
	Scope   *string `json:"scope"`
	Space   *string `json:"space"`
	Cwd     *string `json:"cwd"`
	Input   *string `json:"input"`
	After   *string `json:"after"`
	Query   *string `json:"query"`
	Delete  *bool   `json:"delete"`
	DryRun  *bool   `json:"dry_run"`
	archivedFields
	decideFields
	archivableFields
}

// CheckRequestLength is the one bound of a request line still arriving,
// shared by the sockets and the ctl files: n bytes of it have come, its
// newline not counted. Over abi.MaxRequestBytes is EMSGSIZE at once, so
// no transport buffers more than that for a line it will refuse; where
// names the transport in the message ("ctl"; "" for a socket).
func CheckRequestLength(where string, n int) error {
	if n > abi.MaxRequestBytes {
		return RequestTooLong(where)
	}
	return nil
}

// RequestTooLong is the error of a request over abi.MaxRequestBytes.
func RequestTooLong(where string) error {
	return abi.Errorf(syscall.EMSGSIZE, where, "request over %d bytes", abi.MaxRequestBytes)
}

// ParseRequest parses and checks one request line (a trailing newline is
// allowed). Over abi.MaxRequestBytes is EMSGSIZE; anything malformed, an
// unknown op, a missing required field or an invalid name is EINVAL.
// Unknown fields are ignored.
func ParseRequest(line []byte) (*Request, error) { return ParseControlRequest(line, "") }

// ParseControlRequest is ParseRequest for a request written to the ctl
// file of a session in space ("" for a home's): the scope and space the
// request leaves out are the session's, so a shared session's request
// may name its scope without its space, or its space without its scope
// (SPEC 7: if present they must name this session and its scope; on a
// socket nothing else says the space). Whether what it names is the
// session's is session.Engine.BeginControl's to check.
func ParseControlRequest(line []byte, space string) (*Request, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line) > abi.MaxRequestBytes {
		return nil, abi.Errorf(syscall.EMSGSIZE, "", "request of %d bytes is over the %d-byte limit", len(line), abi.MaxRequestBytes)
	}
	if err := abi.CheckLogLine(line); err != nil {
		return nil, abi.Errorf(syscall.EINVAL, "", "request is not one JSON object on one line")
	}
	w, err := decodeWire(line)
	if err != nil {
		return nil, abi.Errorf(syscall.EINVAL, "", "bad request field: %v", err)
	}
	if w.Op == nil {
		return nil, abi.Errorf(syscall.EINVAL, "", "request has no op")
	}
	r := &Request{Op: *w.Op, Session: abi.DefaultSession, Scope: abi.ScopePrivate}
	if space != "" {
		r.Scope = abi.ScopeShared
	}
	if w.Session != nil {
		r.Session, r.SessionGiven = *w.Session, true
	}
	if w.Scope != nil {
		r.Scope, r.ScopeGiven = *w.Scope, true
	}
	r.ID = deref(w.ID)
	if w.Space != nil {
		r.Space = *w.Space
	} else if r.Scope == abi.ScopeShared {
		r.Space = space
	}
	r.Cwd = deref(w.Cwd)
	r.After = deref(w.After)
	if err := r.checkCommon(w, space != ""); err != nil {
		return nil, err
	}
	switch r.Op {
	case OpSend:
		return r, r.checkSend(w)
	case OpCancel:
		if r.ID == "" || !(abi.ValidName(r.ID) || abi.IsRunID(r.ID)) {
			return nil, abi.Errorf(syscall.EINVAL, "", "cancel needs the id of a run or a client")
		}
	case OpStatus, OpPing, OpImport, OpPending:
	case OpCompact:
	case OpApprove, OpAnswer:
		return r, r.checkDecide(w)
	case OpRestore:
		return r, r.checkRestore(w)
	case OpSearch:
		return r, r.checkSearch(w)
	case OpArchive:
		if !r.SessionGiven || r.Scope == abi.ScopeTemp {
			return nil, abi.Errorf(syscall.EINVAL, "", "archive needs the name of a session in a home or space")
		}
		r.Delete = w.Delete != nil && *w.Delete
		r.DryRun = w.DryRun != nil && *w.DryRun
		return r, r.checkArchived(w)
	case OpArchivable:
		return r, r.checkArchivable(w)
	case OpResume:
		if w.After != nil && !abi.IsRunID(r.After) {
			return nil, abi.Errorf(syscall.EINVAL, "", "after %q is not a run id", r.After)
		}
	default:
		return nil, abi.Errorf(syscall.EINVAL, "", "unknown op %q", r.Op)
	}
	return r, nil
}

// checkCommon checks the location fields every op may carry; inSpace:
// the request was written to a shared session's ctl, which says the
// space.
func (r *Request) checkCommon(w wireRequest, inSpace bool) error {
	if err := abi.CheckName("session", r.Session); err != nil {
		return err
	}
	if !abi.ValidScope(r.Scope) {
		return abi.Errorf(syscall.EINVAL, "", "unknown scope %q", r.Scope)
	}
	if r.Scope == abi.ScopeShared {
		if w.Space == nil && !inSpace {
			return abi.Errorf(syscall.EINVAL, "", "scope shared needs a space")
		}
		if err := abi.CheckName("space", r.Space); err != nil {
			return err
		}
	} else if w.Space != nil {
		return abi.Errorf(syscall.EINVAL, "", "space goes only with scope shared")
	}
	return nil
}

func (r *Request) checkSend(w wireRequest) error {
	if w.ID == nil {
		return abi.Errorf(syscall.EINVAL, "", "send needs a client id")
	}
	if err := abi.CheckName("client id", r.ID); err != nil {
		return err
	}
	if w.Input == nil {
		return abi.Errorf(syscall.EINVAL, "", "send needs an input")
	}
	r.Input = *w.Input
	if strings.IndexByte(r.Input, 0) >= 0 {
		return abi.Errorf(syscall.EINVAL, "", "input contains NUL")
	}
	if w.Cwd != nil {
		return abi.CheckCwd(r.Cwd)
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// MaxQueryBytes bounds a search query.
const MaxQueryBytes = 1024

// checkSearch: a query of 1 to MaxQueryBytes bytes without NUL, in a home
// or a space (temp sessions live in memory and are never listed).
func (r *Request) checkSearch(w wireRequest) error {
	switch {
	case w.Query == nil || *w.Query == "":
		return abi.Errorf(syscall.EINVAL, "", "search needs a query")
	case len(*w.Query) > MaxQueryBytes:
		return abi.Errorf(syscall.EINVAL, "", "query of %d bytes is over the %d-byte limit", len(*w.Query), MaxQueryBytes)
	case strings.IndexByte(*w.Query, 0) >= 0:
		return abi.Errorf(syscall.EINVAL, "", "query contains NUL")
	case r.Scope == abi.ScopeTemp:
		return abi.Errorf(syscall.EINVAL, "", "search covers homes and shared spaces, not temp sessions")
	}
	r.Query = *w.Query
	return nil
}
