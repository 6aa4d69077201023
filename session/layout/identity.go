package layout

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// SealDir holds the seals of a session's logs and its identity. Its name
// starts with a dot: the FUSE projection never shows dot names.
const SealDir = ".seal"

// IdentityFile is the session's identity in SealDir: a random id drawn at
// creation and the session's place then ("<32 hex> <store path>\n"). Every
// seal record of the session's logs is bound to it (sealedlog.Binding), so
// a log and seal moved between sessions, swapped between the two logs, or
// brought back into a session recreated at the same place no longer
// verify; and the place it names must be where the session is.
const IdentityFile = "identity"

// maxIdentity bounds what is read of an identity file.
const maxIdentity = 512

// SealRel is the seal of one of the session's logs.
func SealRel(sessionRel, file string) string { return path.Join(sessionRel, SealDir, file) }

// NewIdentity draws a session's identity for the place rel.
func NewIdentity(rel string) ([]byte, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil { // getrandom(2)
		return nil, err
	}
	return []byte(hex.EncodeToString(id[:]) + " " + rel + "\n"), nil
}

// LogPlace is where one of a session's logs and its seal are, bound to the
// session's identity, its seal keyed with the store's key.
func LogPlace(root *storefs.Root, key *sealedlog.Key, sessionRel, file string, identity []byte) sealedlog.Place {
	return sealedlog.Place{Root: root, Log: sessionRel + "/" + file, Seal: SealRel(sessionRel, file), Bind: sealedlog.Binding(identity, file), Key: key}
}

// ReadIdentity reads the identity of the session at rel and checks that it
// names where the session is (for an archived session, where it lived).
// problem says what is wrong ("" when nothing is); the session is then
// unprovable, whatever its logs say.
func ReadIdentity(root *storefs.Root, rel string) (identity []byte, problem string) {
	b, err := root.ReadFile(SealRel(rel, IdentityFile), maxIdentity)
	if err != nil {
		return nil, "session identity: " + ErrWords(err)
	}
	id, place, ok := strings.Cut(strings.TrimSuffix(string(b), "\n"), " ")
	if !ok || len(id) != 32 || !isHex(id) || strings.ContainsAny(place, " \n") {
		return nil, "session identity is malformed"
	}
	if want := livePlace(rel); place != want {
		return nil, "session identity names another place (" + place + ")"
	}
	return b, ""
}

// livePlace is where the session at rel lived: rel itself, or for an
// archived session (home/<uid>/archived_sessions/<agent>/<s>) its place
// in the agent's session/ directory.
func livePlace(rel string) string {
	parts := strings.Split(rel, "/")
	if len(parts) == 5 && parts[0] == "home" && parts[2] == abi.ArchivedDir {
		return path.Join(parts[0], parts[1], abi.KindAgent, parts[3], "session", parts[4])
	}
	return rel
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// JournalDir is where the store-wide write-ahead journal (sealedlog.Journal)
// keeps its files: the server's own directory, never served.
const JournalDir = StateDir

// LocateLog tells the journal's replay which log a record's path names
// now: the session there, by its identity.
func LocateLog(root *storefs.Root, key *sealedlog.Key) sealedlog.Locate {
	return func(logRel string) (sealedlog.Place, error) {
		dir, file := path.Split(logRel)
		dir = path.Clean(dir)
		identity, problem := ReadIdentity(root, dir)
		if problem != "" {
			return sealedlog.Place{}, fmt.Errorf("%s", problem)
		}
		return LogPlace(root, key, dir, file, identity), nil
	}
}

// ErrWords is what went wrong, without a path: "missing", or
// storefs.Words.
func ErrWords(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	return storefs.Words(err)
}
