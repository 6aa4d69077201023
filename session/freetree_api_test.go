package session

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The free trees' door refuses every path outside a free tree (ENOENT),
// whatever the call, and changes nothing there: the FUSE projection can
// reach no log, seal or ABI file through it.
func TestFreeTreeChecksPlace(t *testing.T) {
	env := newEnv(t)
	ft := env.e.FreeTree()
	testkit.Must(t, env.e.MkdirAt(root0, "home/0/agent"))
	testkit.Must(t, env.e.MkdirAt(root0, "home/0/agent/coder"))
	testkit.Must(t, env.e.MkdirAt(root0, "home/0/agent/coder/session/s1"))
	sess := "home/0/agent/coder/session/s1"
	log := filepath.Join(env.store, sess, "messages.jsonl")
	before, err := os.ReadFile(log)
	testkit.Must(t, err)
	cred := ft.Cred(root0, sess)
	for what, err := range map[string]error{
		"lstat a log":       func() error { _, err := ft.Lstat(sess + "/messages.jsonl"); return err }(),
		"list a session":    func() error { _, err := ft.ReadDir(sess); return err }(),
		"open a log":        func() error { _, err := ft.OpenFile(cred, sess+"/messages.jsonl", os.O_WRONLY, 0); return err }(),
		"remove a log":      ft.Remove(cred, sess+"/messages.jsonl"),
		"mkdir in session":  ft.Mkdir(cred, sess+"/x", 0o755),
		"rename out":        ft.Rename(cred, "home/0/agent/coder/root/a", sess+"/messages.jsonl", 0),
		"link a log in":     ft.Link(cred, sess+"/messages.jsonl", "home/0/agent/coder/root/l"),
		"chown to caller":   ft.GiveToCaller(root0, sess+"/messages.jsonl"),
		"the store's .seal": ft.Remove(cred, sess+"/.seal"),
	} {
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("%s: %v, want ENOENT", what, err)
		}
	}
	if after, err := os.ReadFile(log); err != nil || string(after) != string(before) {
		t.Errorf("the log changed: %q → %q (%v)", before, after, err)
	}
	if _, err := os.Stat(filepath.Join(env.store, sess, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory was made in the session: %v", err)
	}
	if _, err := os.Stat(filepath.Join(env.store, sess, ".seal")); err != nil {
		t.Errorf("the seal directory: %v", err)
	}
}
