package session

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/versions"
)

// A tool's change keeps the file's earlier state in the session's
// versions, within the session's bound (EDQUOT beyond: nothing written),
// and the mount's rules see versions/ read only and verified.
func TestKeepVersion(t *testing.T) {
	env := newEnvLimits(t, quota.LimitConfig{VersionBytes: 400})
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello"}`)
	ref := coderDefault()
	s, release, err := env.e.lookup(ref)
	testkit.Must(t, err)
	defer release()
	// No one makes versions/ through the mount: the first Keep does.
	testkit.WantErrno(t, "mkdir versions", env.e.MkdirAt(root0, s.rel+"/versions"), syscall.EPERM)
	_, err = env.e.Lookup(0, s.rel+"/versions")
	testkit.WantErrno(t, "versions/ before the first Keep", err, syscall.ENOENT)
	call := agent.ToolCall{ID: "call_1", Name: "fs.write"}
	testkit.Must(t, s.keepVersion("R1", call, agent.FileBefore{Path: "/w/new.txt"}))
	testkit.Must(t, s.keepVersion("R1", call, agent.FileBefore{Path: "/w/a.txt", Existed: true, Content: []byte("old\n")}))
	st, err := versions.Open(env.e.root, env.e.sealKey, s.rel)
	testkit.Must(t, err)
	list, err := st.List()
	testkit.Must(t, err)
	if len(list) != 2 || list[0].Action != versions.Create || list[1].Action != versions.Modify || list[1].Call != "call_1" || list[1].Run != "R1" {
		t.Fatalf("versions %+v", list)
	}

	before := testkit.Snapshot(t, env.store, nil)
	err = s.keepVersion("R1", call, agent.FileBefore{Path: "/w/big", Existed: true, Content: make([]byte, 400)})
	testkit.WantErrno(t, "a keep over the session's bound", err, syscall.EDQUOT)
	testkit.Same(t, "a refused keep", before, testkit.Snapshot(t, env.store, nil))

	idx := s.rel + "/versions/index.jsonl"
	n, err := env.e.Lookup(0, idx)
	testkit.Must(t, err)
	testkit.WantErrno(t, "open for writing", env.e.CheckOpen(n.Place, os.O_WRONLY|os.O_APPEND), syscall.EPERM)
	testkit.Must(t, env.e.CheckOpen(n.Place, os.O_RDONLY))
	testkit.WantErrno(t, "chmod", env.e.Setattr(root0, idx, SetAttr{Mode: new(uint32)}), syscall.EPERM)
	p := filepath.Join(env.store, idx)
	b, _ := os.ReadFile(p)
	b[10] ^= 1
	testkit.Must(t, os.WriteFile(p, b, 0o600))
	testkit.WantErrno(t, "open of a tampered index", env.e.CheckOpen(n.Place, os.O_RDONLY), syscall.EIO)
	testkit.WantErrno(t, "a keep over a tampered index", s.keepVersion("R2", call, agent.FileBefore{Path: "/w/x"}), syscall.EIO)
}
