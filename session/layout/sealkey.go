package layout

import (
	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// SessionLogs are the logs of a session, each with its seal.
var SessionLogs = []string{abi.FileMessages, abi.FileEvents}

// OpenSealKey opens the store's seal key (sealedlog.Key, in the server's
// own directory), making one for a store that has none, and finishes the
// store's migration to keyed seals when it is not done: every seal of
// every session, live or archived, that holds unkeyed records (a ctxfs
// before keyed seals wrote it) is rewritten keyed, durably, then the key
// file's rename says the store is migrated. It runs before the journal is
// replayed and before any log is opened, so replay, loads and fsck see
// keyed seals only; a migration a crash interrupted is finished by the
// next start. It returns how many seals it rewrote.
//
// The migration re-judges no log: a rewritten record vouches for exactly
// what it did, and each log is judged against it when it is opened, as
// always. What it cannot know is whether an unkeyed seal was forged
// before the store was migrated: nothing could tell then either.
func OpenSealKey(root *storefs.Root) (*sealedlog.Key, int, error) {
	key, err := sealedlog.OpenKey(root, StateDir)
	if err != nil || !key.Migrating() {
		return key, 0, err
	}
	n := 0
	for _, dir := range SessionDirs(root) {
		for _, f := range SessionLogs {
			changed, err := sealedlog.Rekey(LogPlace(root, key, dir, f, nil))
			if err != nil {
				return nil, n, err
			}
			if changed {
				n++
			}
		}
	}
	return key, n, key.Migrated(root, StateDir)
}

// ReadSealKey is the store's seal key for fsck without --repair, which
// changes nothing: the key the store has, or none for a store no server
// with keyed seals has opened (its unkeyed seals are then checked as
// before). A key file that cannot be used is a problem, and every keyed
// seal is then reported as not verifying.
func ReadSealKey(root *storefs.Root, report func(path, what string)) *sealedlog.Key {
	key, err := sealedlog.ReadKey(root, StateDir)
	if err != nil {
		report(root.Show(StateDir+"/"+sealedlog.KeyFile), storefs.Words(err))
		return sealedlog.NewKey(nil)
	}
	return key
}
