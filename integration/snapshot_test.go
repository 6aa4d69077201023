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
	return out
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
