package integration

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// snapshot is the store byte for byte, without the server's own
// bookkeeping (run journal, lock, log), for "nothing was written" checks.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	return testkit.Snapshot(t, dir, func(rel string) bool {
		return rel == ".ctxfs" || rel == ".ctxfs.lock" || rel == "ctxfs.log"
	})
}

// storeSnapshot is snapshot of a running server's store, with the files
// it derives from the logs (a live session's state, latest.md,
// updated_at, AGENTS.md, SKILLS.md) taken as the mount serves them, not as
// the store holds them at this instant: the server writes them to the
// store behind, up to a second after they change (session/value_derived.go),
// which is no write of whatever ran between two snapshots. Their spare
// twins are left out for the same reason.
func storeSnapshot(t testing.TB, s *server) map[string]string {
	t.Helper()
	out := snapshot(t, s.store)
	for rel := range out {
		name, spare, ok := derivedFile(rel)
		if !ok {
			continue
		}
		delete(out, rel)
		if spare {
			continue
		}
		v := "served: "
		st, err := os.Stat(s.mnt(rel))
		b, rerr := os.ReadFile(s.mnt(rel))
		if err == nil && rerr == nil {
			sys := st.Sys().(*syscall.Stat_t)
			v += fmt.Sprintf("%v %d:%d %d %x", st.Mode(), sys.Uid, sys.Gid, st.Size(), sha256.Sum256(b))
		} else {
			v += fmt.Sprint(err, rerr)
		}
		out[filepath.Join(filepath.Dir(rel), name)] = v
	}
	servedIndexes(t, s, out)
	return out
}

// servedIndexes replaces the store's index files of every session
// container in out with the index as the mount serves it. The index's
// values live in the journal and in memory; its store files are written
// when the journal is checkpointed (every 30 s), which is no write of
// whatever ran between two snapshots: TestSpaceNamesQuota saw index/list
// "changed" by the checkpoint of mkdirs made before its first snapshot.
func servedIndexes(t testing.TB, s *server, out map[string]string) {
	t.Helper()
	indexes := map[string]bool{}
	for rel := range out {
		container, _, ok := strings.Cut(rel, "/session/")
		if !ok {
			continue
		}
		idx := container + "/session/index"
		indexes[idx] = true
		if rel == idx || strings.HasPrefix(rel, idx+"/") {
			delete(out, rel)
		}
	}
	for idx := range indexes {
		filepath.WalkDir(s.mnt(idx), func(p string, d os.DirEntry, err error) error {
			rel := idx + strings.TrimPrefix(p, s.mnt(idx))
			switch {
			case err != nil:
				out[rel] = "served: " + err.Error()
			case d.IsDir():
				out[rel] = "served: dir"
			default:
				b, err := os.ReadFile(p)
				out[rel] = fmt.Sprintf("served: %x %v", sha256.Sum256(b), err)
			}
			return nil
		})
	}
}

// derivedFile reports whether rel is a derived file of a live session
// (…/session/<name>/<file>), or its spare twin (.<file>.spare).
func derivedFile(rel string) (name string, spare, ok bool) {
	name = filepath.Base(rel)
	if n, cut := strings.CutPrefix(name, "."); cut {
		name, spare = strings.CutSuffix(n, ".spare")
		if !spare {
			return "", false, false
		}
	}
	switch name {
	case "state", "latest.md", "updated_at", "AGENTS.md", "SKILLS.md":
	default:
		return "", false, false
	}
	parts := strings.Split(rel, "/")
	return name, spare, len(parts) >= 3 && parts[len(parts)-3] == "session"
}
