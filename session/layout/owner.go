package layout

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Who owns what in the store, and how the mount shows it: the store's
// shape in owners and modes (SPEC 2, and issue 19's root-owned history).

// PrivateOwner owns what the engine makes in uid's home: 0700/0600. It
// is the logical owner, what the mount shows: the store holds history as
// HistoryOwner says, and only the free trees as this.
func PrivateOwner(uid, gid uint32) storefs.Owner {
	return storefs.Owner{Uid: int(uid), Gid: int(gid), DirMode: 0o700, FileMode: 0o600}
}

// SharedOwner owns what uid makes in a shared space whose group is gid:
// the group reads and writes everything (SPEC 2). Logical, as
// PrivateOwner.
func SharedOwner(uid, gid uint32) storefs.Owner {
	return storefs.Owner{Uid: int(uid), Gid: int(gid), DirMode: 0o770, FileMode: 0o660}
}

// History is the server's (issue 19, finding 4): every store directory and
// file of a home or a space but its free trees (logs, seals, identities,
// values, the index, archives, the directories holding them, home/<uid>
// itself) belongs to the server's uid, with its owner's mode bits only.
// A user who reaches the store by a path (a jailed process's
// /proc/PID/root/..) can then neither read nor change their history
// there: they reach it only through the mount, which shows each file its
// logical owner and mode (ShownStat). The store keeps the logical group as
// the file's group: with no group bits it grants nothing, and the mount
// shows it. The free trees (an agent's root/, a session's context/) stay
// their user's, as users keep anything there.

// HistoryOwner is how the store holds history whose logical owner is own.
func HistoryOwner(own storefs.Owner) storefs.Owner {
	return storefs.Owner{Uid: ServerUid, Gid: own.Gid, DirMode: own.DirMode & 0o700, FileMode: own.FileMode & 0o700}
}

// OwnerAt is the owner the store file rel is made with, for the logical
// owner own: own itself in a free tree, HistoryOwner(own) anywhere else.
func OwnerAt(rel string, own storefs.Owner) storefs.Owner {
	if FreeTree(rel) {
		return own
	}
	return HistoryOwner(own)
}

// ShownReadOnly reports whether the mount shows rel (place p) without
// write bits: read-only session files, versions and archives. The
// archive's own directories (archived_sessions and archived_sessions/<agent>,
// ArchiveDir) keep them: there a user makes the agent's directory and
// renames a session into it to archive it (SPEC 12), which the kernel
// checks against these bits first; the engine refuses any other name made
// there (EPERM). Shown read only, they let root alone archive.
func ShownReadOnly(rel string, p Place) bool {
	switch p.Kind {
	case PlaceReadOnly, PlaceVersion:
		return true
	case PlaceArchived:
		_, _, dir := ArchiveDir(rel)
		return !dir
	}
	return false
}

// ShownStat is st, the store's stat of rel, as the mount shows it: history
// with its logical owner, the uid of its home (and in a space, the owner's
// bits given to the space's group too, which the file keeps as its group);
// the top directories, the spaces themselves and the free trees as they
// are. st is not changed.
func ShownStat(rel string, st *unix.Stat_t) *unix.Stat_t {
	p := Classify(rel) // once: this is on every lookup's path
	if !p.Exists() || p.Kind == PlaceTop || p.Kind == PlaceSpace || InFreeTree(rel, p) {
		return st
	}
	out := *st
	if uid, ok := strings.CutPrefix(p.Home, "home/"); ok {
		n, _ := strconv.ParseUint(uid, 10, 32) // Classify checked it
		out.Uid = uint32(n)
	} else {
		out.Mode |= (st.Mode & 0o700) >> 3
	}
	return &out
}
