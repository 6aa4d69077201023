package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestExampleCLIAgentRoot runs examples/cli-agent/prepare-root.sh on the
// pinned Claude Code (glibc) and Codex (static musl) for uid 1000: the
// root/ it makes holds the libraries each executable links against (none
// for Codex), the certificates, tmp/ 1777 and home/agent/ of that uid; the
// executable starts chrooted there as that uid (its --version, bound in as
// the server binds the program); Gemini CLI is refused and nothing is made.
func TestExampleCLIAgentRoot(t *testing.T) {
	exRequireBusybox(t)
	bin := cliBinDir(t)
	s := newFuseServer(t)
	path := bin + ":/usr/local/bin:/usr/bin:/bin"
	for _, c := range []struct{ cli, agent string }{{"claude-code", "claude"}, {"codex", "codex"}} {
		if out, code := ctxAdd(t, s, nil, path, c.agent, "--cli", c.cli, "--isolation", "chroot"); code != 0 {
			t.Fatalf("add %s: exit %d\n%s", c.agent, code, out)
		}
		out := exMustScript(t, "cli-agent/prepare-root.sh", "--root", s.root, "--cli", c.cli, "1000", c.agent)
		dest := filepath.Join(s.root, "home", "1000", "agent", c.agent, "root")
		real, err := filepath.EvalSymlinks(filepath.Join(s.root, "agent", c.agent))
		testkit.Must(t, err)
		if c.cli == "codex" {
			// The npm program is the node launcher: the script names
			// the native binary to run instead.
			real = strings.TrimSpace(strings.Split(strings.SplitN(out, "its native binary is ", 2)[1], ":")[0])
			if _, err := os.Stat(filepath.Join(dest, "lib64")); !os.IsNotExist(err) {
				t.Errorf("codex is static, yet its root/ has lib64: %v\n%s", err, out)
			}
		} else {
			for _, lib := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"} {
				if fileBytes(t, filepath.Join(dest, lib)) != fileBytes(t, lib) {
					t.Errorf("%s: %s is not the host's\n%s", c.agent, lib, out)
				}
			}
		}
		if fileBytes(t, filepath.Join(dest, "etc/ssl/certs/ca-certificates.crt")) != fileBytes(t, "/etc/ssl/certs/ca-certificates.crt") {
			t.Errorf("%s: no certificates", c.agent)
		}
		wantOwnerMode(t, filepath.Join(dest, "tmp"), 1000, os.ModeSticky|0o777)
		wantOwnerMode(t, filepath.Join(dest, "home", "agent"), 1000, 0o700)
		// Again: nothing changes.
		snap := testkit.Snapshot(t, dest, nil)
		exMustScript(t, "cli-agent/prepare-root.sh", "--root", s.root, "--cli", c.cli, "1000", c.agent)
		testkit.Same(t, c.agent+": a second run", snap, testkit.Snapshot(t, dest, nil))
		wantStartsInJail(t, dest, real)
	}
	out, code := exScript(t, "cli-agent/prepare-root.sh", "--root", s.root, "--cli", "gemini", "1000", "gem")
	if code != 1 || !strings.Contains(out, "prepare-root.sh: Gemini CLI is a node bundle") {
		t.Errorf("gemini: exit %d, %q", code, out)
	}
	if _, err := os.Lstat(filepath.Join(s.root, "home", "1000", "agent", "gem")); !os.IsNotExist(err) {
		t.Errorf("gemini refused, yet agent/gem was made: %v", err)
	}
}

// wantOwnerMode fails unless p is a directory of uid with mode.
func wantOwnerMode(t *testing.T, p string, uid uint32, mode os.FileMode) {
	t.Helper()
	st, err := os.Stat(p)
	testkit.Must(t, err)
	if st.Sys().(*syscall.Stat_t).Uid != uid || st.Mode()&(os.ModeSticky|os.ModePerm) != mode {
		t.Errorf("%s: uid %d mode %v, want uid %d mode %v", p, st.Sys().(*syscall.Stat_t).Uid, st.Mode(), uid, mode)
	}
}

// withoutAtimes is a hostSnapshot without its atimes.
func withoutAtimes(snap map[string]string) map[string]string {
	for k := range snap {
		if strings.HasSuffix(k, atimeKey) {
			delete(snap, k)
		}
	}
	return snap
}

// wantStartsInJail runs exe --version chrooted into a copy of root/'s
// libraries, as uid 1000, with exe bound in as /cli: it fails unless the
// libraries the script copied are all it needs to start. (The copy
// dereferences: an open with O_NOFOLLOW, as cp -a makes, is ELOOP through
// the mount.)
func wantStartsInJail(t *testing.T, root, exe string) {
	t.Helper()
	jail := t.TempDir()
	os.Chmod(jail, 0o755)
	bash(t, "cd "+root+" && for d in lib lib64; do [ ! -d $d ] || cp -rL $d "+jail+"/; done; touch "+jail+"/cli")
	cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --bind "$1" "$2/cli" && exec chroot --userspec=1000:1000 "$2" /cli --version`, "sh", exe, jail)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/agent"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ".") {
		t.Errorf("%s --version in the jail: %v\n%s", exe, err, out)
	}
}

// TestExampleCLIAgentRootSymlink: run by root, prepare-root.sh writes in a
// user's root/ with that user's rights: a symlink the user planted there
// (lib64 -> a directory only root may write) makes it fail, and nothing is
// written where the link leads (as root it would have put the loader
// there).
func TestExampleCLIAgentRootSymlink(t *testing.T) {
	exRequireBusybox(t)
	bin := cliBinDir(t)
	s := newFuseServer(t)
	if out, code := ctxAdd(t, s, nil, bin+":/usr/bin:/bin", "claude", "--cli", "claude-code", "--isolation", "chroot"); code != 0 {
		t.Fatalf("add: exit %d\n%s", code, out)
	}
	victim := filepath.Join(filepath.Dir(s.root), "victim")
	testkit.Must(t, os.Mkdir(victim, 0o755))
	dest := filepath.Join(s.root, "home", "1000", "agent", "claude", "root")
	testkit.Must(t, os.MkdirAll(dest, 0o755))
	if out, err := bashAs(t, jailUser, "ln -s "+victim+" "+dest+"/lib64"); err != nil {
		t.Fatalf("planting the link: %v\n%s", err, out)
	}
	out, code := exScript(t, "cli-agent/prepare-root.sh", "--root", s.root, "--cli", "claude-code", "1000", "claude")
	if code == 0 {
		t.Errorf("prepare-root.sh went through a planted link:\n%s", out)
	}
	if ents, err := os.ReadDir(victim); err != nil || len(ents) != 0 {
		t.Errorf("written where the user's link leads: %v %v\n%s", ents, err, out)
	}
}
