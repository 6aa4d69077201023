package session

import (
	"crypto/rand"
	"encoding/hex"
	"path"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// sealDir holds the seals of a session's logs and its identity. Its name
// starts with a dot: the FUSE projection never shows dot names.
const sealDir = ".seal"

// identityFile is the session's identity in sealDir: a random id drawn at
// creation and the session's place then ("<32 hex> <store path>\n"). Every
// seal record of the session's logs is bound to it (sealedlog.Binding), so
// a log and seal moved between sessions, swapped between the two logs, or
// brought back into a session recreated at the same place no longer
// verify; and the place it names must be where the session is.
const identityFile = "identity"

// maxIdentity bounds what is read of an identity file.
const maxIdentity = 512

// sealRel is the seal of one of the session's logs.
func sealRel(sessionRel, file string) string { return path.Join(sessionRel, sealDir, file) }

// newIdentity draws a session's identity for the place rel.
func newIdentity(rel string) ([]byte, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil { // getrandom(2)
		return nil, err
	}
	return []byte(hex.EncodeToString(id[:]) + " " + rel + "\n"), nil
}

// logPlace is where one of a session's logs and its seal are, bound to the
// session's identity, its seal keyed with the store's key.
func logPlace(root *storefs.Root, key *sealedlog.Key, sessionRel, file string, identity []byte) sealedlog.Place {
	return sealedlog.Place{Root: root, Log: sessionRel + "/" + file, Seal: sealRel(sessionRel, file), Bind: sealedlog.Binding(identity, file), Key: key}
}

// readIdentity reads the identity of the session at rel and checks that it
// names where the session is (for an archived session, where it lived).
// problem says what is wrong ("" when nothing is); the session is then
// unprovable, whatever its logs say.
func readIdentity(root *storefs.Root, rel string) (identity []byte, problem string) {
	b, err := root.ReadFile(sealRel(rel, identityFile), maxIdentity)
	if err != nil {
		return nil, "session identity: " + errWords(err)
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
