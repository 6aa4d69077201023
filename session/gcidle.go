package session

import (
	"errors"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/session/layout"
)

// gcIdlePattern is what the server's own clean-up takes: Agenvoy-style
// temporary sessions, by name.
const gcIdlePattern = "temp-*"

// GCIdle archives (never deletes) every agent session in a home whose
// name matches gcIdlePattern and that nothing has updated for idle
// (ctxfs mount --gc-idle): the same Archive as ctx's, with the same
// protections, so an active or current session stays. It returns the
// store paths of the sessions it archived.
func (e *Engine) GCIdle(idle time.Duration) []string {
	var done []string
	cutoff := time.Now().Add(-idle).Unix()
	for _, home := range layout.Homes(e.root) {
		if !strings.HasPrefix(home, "home/") {
			continue // archives live in homes (SPEC 2)
		}
		uid, err := strconv.ParseUint(strings.TrimPrefix(home, "home/"), 10, 32)
		if err != nil {
			continue
		}
		own := layout.PrivateOwner(uint32(uid), primaryGid(uint32(uid)))
		for _, rel := range layout.HomeSessionDirs(e.root, home, false) {
			ct, name, ok := layout.ParseContainerRel(rel)
			if m, _ := path.Match(gcIdlePattern, name); !ok || !m || ct.Kind != abi.KindAgent {
				continue
			}
			if e.readUnix(rel+"/"+abi.FileUpdatedAt) > cutoff {
				continue
			}
			err := e.Archive(layout.Ref{Container: ct, Name: name}, own, false)
			if err == nil {
				done = append(done, rel)
			} else if !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EEXIST) {
				e.cfg.Log.Warn("gc-idle: not archived", "session", rel, "err", err)
			}
		}
	}
	return done
}
