package fs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/session"
)

// fuseUsable reports whether this process can serve FUSE mounts. Without
// it the tests skip, unless CTXFS_REQUIRE_FUSE says they must run.
func fuseUsable(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err == nil && os.Geteuid() == 0 {
		f.Close()
		return
	}
	if err == nil {
		f.Close()
		if _, lerr := exec.LookPath("fusermount3"); lerr == nil {
			return
		}
		err = errors.New("not root and no fusermount3")
	}
	if os.Getenv("CTXFS_REQUIRE_FUSE") != "" {
		t.Fatalf("FUSE required but unusable: %v", err)
	}
	t.Skipf("FUSE unusable: %v", err)
}

// env is one mounted ctxfs over a fresh store.
type env struct {
	t     *testing.T
	root  string // the mount root: root/home, root/shared
	store string
	e     *session.Engine
}

func mountEnv(t *testing.T) *env {
	t.Helper()
	fuseUsable(t)
	// The mount root must be reachable by other uids (privacy tests), so it
	// is not a 0700 t.TempDir.
	root, err := os.MkdirTemp("", "ctxfs-mnt-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(root, 0o755)
	store := t.TempDir()
	e, err := session.Open(session.Config{Store: store, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Mount(e, root, Options{Debug: os.Getenv("CTXFS_FUSE_DEBUG") != ""})
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ms.Unmount(); err != nil {
			t.Logf("unmount: %v; detaching", err)
			for _, top := range tops {
				exec.Command("umount", "-l", filepath.Join(root, top)).Run()
			}
		}
		e.Close()
		os.RemoveAll(root)
	})
	return &env{t: t, root: root, store: store, e: e}
}

// p is a path in the mount.
func (v *env) p(rel string) string { return filepath.Join(v.root, rel) }

const (
	agentRel = "home/0/agent/coder"
	sessRel  = agentRel + "/session/s1"
)

// agent makes home/0/agent/coder through the mount.
func (v *env) agent() {
	v.t.Helper()
	if err := os.Mkdir(v.p("home/0/agent"), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		// ENGINE: Mkdir refuses home/<uid>/agent itself (EPERM); until it
		// accepts it (or EnsureHome makes it), make it in the store so the
		// rest of the test can run.
		v.t.Errorf("mkdir home/0/agent through the mount: %v", err)
		if err := os.MkdirAll(filepath.Join(v.store, "home/0/agent"), 0o700); err != nil {
			v.t.Fatal(err)
		}
	}
	if err := os.Mkdir(v.p(agentRel), 0o700); err != nil {
		v.t.Fatalf("mkdir agent: %v", err)
	}
}

// session makes home/0/agent/coder/session/s1 through the mount.
func (v *env) session() {
	v.t.Helper()
	v.agent()
	if err := os.Mkdir(v.p(sessRel), 0o700); err != nil {
		v.t.Fatalf("mkdir session: %v", err)
	}
}

func (v *env) read(rel string) string {
	v.t.Helper()
	b, err := os.ReadFile(v.p(rel))
	if err != nil {
		v.t.Fatalf("read %s: %v", rel, err)
	}
	return string(b)
}

func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

// eventually waits up to 2 s for cond (RELEASE and engine notifications
// arrive after the system call that caused them has returned).
func (v *env) eventually(what string, cond func() bool) {
	v.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			v.t.Errorf("timed out: %s", what)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
