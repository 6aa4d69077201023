package integration

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Issue 19: no dynamic loader runs for the binaries, whose helpers run
// as root with environments a definition names.

// TestBinariesStatic: ctxfs and ctx, as built, ask for no dynamic loader
// and need no shared library: a loader would honour LD_PRELOAD and the
// like in the environment of the helpers ctxfs runs as root.
func TestBinariesStatic(t *testing.T) {
	for _, bin := range []string{ctxfsBin, ctxBin} {
		f, err := elf.Open(bin)
		testkit.Must(t, err)
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s has a PT_INTERP program header: dynamically linked", bin)
			}
		}
		libs, err := f.ImportedLibraries()
		testkit.Must(t, err)
		if len(libs) > 0 {
			t.Errorf("%s needs shared libraries (DT_NEEDED): %v", bin, libs)
		}
	}
}

// TestMountRefusesDynamicBinary: a ctxfs built with cgo (dynamically
// linked) refuses to mount, naming the fix, and makes nothing.
func TestMountRefusesDynamicBinary(t *testing.T) {
	dyn := filepath.Join(t.TempDir(), "ctxfs-dynamic")
	build := exec.Command("go", "build", "-o", dyn, "../cmd/ctxfs")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a dynamic ctxfs: %v\n%s", err, out)
	}
	base := t.TempDir()
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	out, err := mountAttempt(t, dyn, root, store)
	if err == nil || !strings.Contains(out, "dynamically linked") || !strings.Contains(out, "CGO_ENABLED=0") {
		t.Fatalf("mount by a dynamic ctxfs: %v\n%s", err, out)
	}
	for _, p := range []string{root, store} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("the refused mount made %s: %v", p, err)
		}
	}
}
