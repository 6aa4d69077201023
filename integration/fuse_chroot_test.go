package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// mountCmd runs mount(8) (or umount) as root with a deadline.
func mountCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := runCmd(t, nil, nil, args[0], args[1:]...); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// TestChrootBindSurvivesRestart: a jail holds a bind mount of the ctx
// root; a process chrooted there reads its session, before and after the
// server restarts.
func TestChrootBindSurvivesRestart(t *testing.T) {
	requireFUSE(t)
	keepFusectlAsIs(t)
	base := t.TempDir()
	openToAll(t, base+"/x")
	s := &server{t: t, root: filepath.Join(base, "ctx"), store: filepath.Join(base, "store")}
	testkit.Must(t, os.MkdirAll(s.root, 0o755))
	// The root is a shared mount, so that the mounts a restarted server
	// makes below it propagate into the jail's (slave) copy.
	mountCmd(t, "mount", "--bind", s.root, s.root)
	t.Cleanup(func() { runCmd(t, nil, nil, "umount", "-l", s.root) })
	mountCmd(t, "mount", "--make-shared", s.root)
	s.define("coder", map[string]string{"model": "debug/echo"})
	s.start()
	s.send("jail", "c1", "inside the jail")

	jail := filepath.Join(base, "jail")
	for _, d := range []string{"ctx", "usr"} {
		testkit.Must(t, os.MkdirAll(filepath.Join(jail, d), 0o755))
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if target, err := os.Readlink("/" + l); err == nil {
			testkit.Must(t, os.Symlink(target, filepath.Join(jail, l))) // merged /usr: bin -> usr/bin
		} else if _, err := os.Stat("/" + l); err == nil {
			testkit.Must(t, os.MkdirAll(filepath.Join(jail, l), 0o755))
			mountCmd(t, "mount", "--bind", "/"+l, filepath.Join(jail, l))
			mountCmd(t, "mount", "-o", "remount,bind,ro", filepath.Join(jail, l))
		}
	}
	unjail := func() {
		for _, d := range []string{"ctx", "usr", "bin", "lib", "lib64", "sbin"} {
			runCmd(t, nil, nil, "umount", "-l", filepath.Join(jail, d))
		}
	}
	t.Cleanup(unjail)
	mountCmd(t, "mount", "--bind", "/usr", filepath.Join(jail, "usr"))
	mountCmd(t, "mount", "-o", "remount,bind,ro", filepath.Join(jail, "usr"))
	mountCmd(t, "mount", "--rbind", s.root, filepath.Join(jail, "ctx"))
	mountCmd(t, "mount", "--make-rslave", filepath.Join(jail, "ctx"))

	inJail := "/ctx/" + sessRel("jail") + "/messages.jsonl"
	catInJail := func(when string) string {
		t.Helper()
		out, err := runCmd(t, nil, nil, "chroot", jail, "/bin/cat", inJail)
		if err != nil {
			t.Fatalf("%s: chroot cat: %v\n%s", when, err, out)
		}
		return out
	}
	if got := catInJail("before the restart"); got != fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "jail"), "messages.jsonl")) || !strings.Contains(got, "inside the jail") {
		t.Errorf("chrooted cat before the restart: %q", got)
	}
	// A chrooted writer appends through the jail's view.
	if out, err := runCmd(t, nil, nil, "chroot", jail, "/bin/sh", "-c", `echo '{"role":"user","content":"from the chroot"}' >> `+inJail); err != nil {
		t.Errorf("chrooted append: %v %s", err, out)
	}

	s.restart(syscall.SIGTERM)
	t.Cleanup(unjail) // before the new server stops
	s.send("jail", "c2", "after the restart")
	got := catInJail("after the restart")
	for _, want := range []string{"inside the jail", "from the chroot", "after the restart"} {
		if !strings.Contains(got, want) {
			t.Errorf("chrooted cat after the restart lacks %q: %q", want, got)
		}
	}
	// And after a crash: the next server cleans the dead mount up, and the
	// jail sees the new one.
	dead := s.crash()
	s.start()
	t.Cleanup(unjail)
	reaped(t, dead)
	if got := catInJail("after a crash"); !strings.Contains(got, "after the restart") {
		t.Errorf("chrooted cat after a crash and restart: %q", got)
	}
}
