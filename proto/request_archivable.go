package proto

import (
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// OpArchivable is gc's preview in one request (SPEC 12; ctx agent session
// gc): "sessions" names the candidates, and the answer says what of each,
// in the order given: the sessions that would be archived now in
// FrameArchivable frames ("sessions": a list of consecutive ones), each
// other one in a FrameKept frame of its own (the errno and reason an
// archive would be refused with now), then one FrameChecked. Nothing is
// written.
const OpArchivable = "archivable"

// Frames of op archivable.
const (
	FrameArchivable = "archivable" // "sessions": the next ones of the list, which would be archived now
	FrameKept       = "kept"       // it would not: code (EBUSY for a protection, …) and message
	FrameChecked    = "checked"    // the last frame: "sessions", how many were checked
)

// MaxArchivableSessions bounds the names of one archivable request
// (EMSGSIZE beyond): the answer is a frame each, and the server's work is
// a check each. ctx sends more candidates in several requests.
const MaxArchivableSessions = 16384

// archivableFields is the wire shape of op archivable's own field.
type archivableFields struct {
	Sessions *[]string `json:"sessions"`
}

// checkArchivable: a list of at most MaxArchivableSessions valid session
// names, in a home or a space, and no "session" (the list names them).
func (r *Request) checkArchivable(w wireRequest) error {
	switch {
	case w.Sessions == nil:
		return abi.Errorf(syscall.EINVAL, "", "archivable needs the list of sessions to check")
	case len(*w.Sessions) > MaxArchivableSessions:
		return abi.Errorf(syscall.EMSGSIZE, "", "archivable of %d sessions is over the %d-session limit", len(*w.Sessions), MaxArchivableSessions)
	case r.SessionGiven:
		return abi.Errorf(syscall.EINVAL, "", "archivable names its sessions in \"sessions\", not \"session\"")
	case r.Scope == abi.ScopeTemp:
		return abi.Errorf(syscall.EINVAL, "", "archivable covers the sessions of a home or space, not temp sessions")
	}
	for _, name := range *w.Sessions {
		if err := abi.CheckName("session", name); err != nil {
			return err
		}
	}
	r.Sessions = *w.Sessions
	return nil
}
