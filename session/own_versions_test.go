package session

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/versions"
)

// TestOwnVersions: a restore in a shared space takes only versions the
// asking uid's own runs made, by the uid their start events record; a run
// this session does not record, or whose start names no uid, is no one's
// (never root's).
func TestOwnVersions(t *testing.T) {
	start := func(run string, uid any) *clientRecord {
		o := proto.NewObject("type", proto.FrameStart, "run", run)
		if uid != nil {
			o.Set("uid", uid)
		}
		return &clientRecord{run: run, start: o}
	}
	s := &sess{clients: map[string]*clientRecord{"a": start("r1", 1001), "b": start("r2", 1002), "c": start("r3", nil), "d": start("r4", "0")}}
	v := func(run string) []versions.Entry { return []versions.Entry{{V: 1, Run: run}} }
	for _, tc := range []struct {
		uid  uint32
		run  string
		want syscall.Errno
	}{{1001, "r1", 0}, {1002, "r1", syscall.EPERM}, {0, "r1", syscall.EPERM}, {1002, "r2", 0}, {0, "r3", syscall.EPERM}, {0, "r4", syscall.EPERM}, {1001, "r9", syscall.EPERM}} {
		err := s.ownVersions(tc.uid, v(tc.run))
		if tc.want == 0 {
			testkit.Must(t, err)
			continue
		}
		testkit.WantErrno(t, fmt.Sprintf("uid %d restoring run %s's version", tc.uid, tc.run), err, tc.want)
	}
	if err := s.ownVersions(1001, append(v("r1"), v("r2")...)); err == nil {
		t.Error("a restore of its own run's version and another's: taken")
	}
}
