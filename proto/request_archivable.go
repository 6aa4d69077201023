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

// FrameDeletable answers op archive's dry run of an archived session
// ("archived":true): there is one of that name, which a delete would
// remove. A delete answers FrameDeleted.
const (
	FrameDeletable = "deletable"
	FrameDeleted   = "deleted"
)

// NoArchiveInSpace is why an archived session is never of a shared space.
const NoArchiveInSpace = "archived sessions live in a home (SPEC 2): a shared space has none"

// archivedFields is the wire shape of op archive's fields for an
// archived session.
type archivedFields struct {
	Archived *bool   `json:"archived"`
	UID      *uint32 `json:"uid"`
}

// checkArchived: "archived" goes with "delete" or "dry_run" (an archived
// session is never archived again) in a home (a shared space has no
// archives, SPEC 2); "uid" goes only with "archived".
func (r *Request) checkArchived(w wireRequest) error {
	r.Archived = w.Archived != nil && *w.Archived
	switch {
	case w.UID != nil && !r.Archived:
		return abi.Errorf(syscall.EINVAL, "", "uid names the home of an archived session: it goes only with archived")
	case !r.Archived:
		return nil
	case !r.Delete && !r.DryRun:
		return abi.Errorf(syscall.EINVAL, "", "an archived session is deleted (delete) or looked for (dry_run), never archived again")
	case r.Scope != abi.ScopePrivate:
		return abi.Errorf(syscall.EINVAL, "", "%s", NoArchiveInSpace)
	}
	r.HomeUid = w.UID
	return nil
}
