package def

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// cacheNow makes every file count as old enough to be witnessed (no racy
// window); tick waits out the filesystem clock's coarse tick, so that the
// next change moves a file's times.
func cacheNow(t *testing.T) { racyFor(t, 0) }

// racyFor sets the racy window to d for the test.
func racyFor(t *testing.T, d time.Duration) {
	old := racyWindow
	racyWindow = d
	t.Cleanup(func() { racyWindow = old })
}

func tick() { time.Sleep(30 * time.Millisecond) }

// TestCacheReadsAgainWhenChanged: a cached definition is served as it is
// while nothing it was read from changes, and read again after each kind
// of change: a control file edited in place (same size), added or
// removed; the program created or made non-executable; a skill added;
// the definition made invalid (the error, not kept) and valid again; an
// agent's model's API changed.
func TestCacheReadsAgainWhenChanged(t *testing.T) {
	cacheNow(t)
	root := t.TempDir()
	dir := filepath.Join(root, "agent", "a.d")
	testkit.WriteFile(t, filepath.Join(dir, "cwd"), "/x\n", 0o644)
	c := NewCache()
	load := func(what string) *Definition {
		t.Helper()
		d, err := c.Load(root, abi.KindAgent, "a")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return d
	}
	d1 := load("first")
	if d2 := load("again"); d2 != d1 {
		t.Fatalf("unchanged definition read again")
	}
	steps := []struct {
		what   string
		change func()
		check  func(d *Definition) bool
	}{
		{"cwd edited in place", func() { testkit.WriteFile(t, filepath.Join(dir, "cwd"), "/y\n", 0o644) }, func(d *Definition) bool { return d.Cwd == "/y" }},
		{"timeout added", func() { testkit.WriteFile(t, filepath.Join(dir, "timeout"), "7\n", 0o644) }, func(d *Definition) bool { return d.Timeout == 7*time.Second }},
		{"timeout removed", func() { os.Remove(filepath.Join(dir, "timeout")) }, func(d *Definition) bool { return d.Timeout == 0 }},
		{"program created", func() { testkit.WriteFile(t, filepath.Join(root, "agent", "a"), "#!/bin/sh\n", 0o755) }, func(d *Definition) bool { return d.Program != "" }},
		{"skill added", func() {
			testkit.WriteFile(t, filepath.Join(dir, "skills", "s", "SKILL.md"), "---\nname: s1\n---\n", 0o644)
		}, func(d *Definition) bool { return len(d.Skills) == 1 && d.Skills[0].Name == "s1" }},
		{"skill edited", func() {
			testkit.WriteFile(t, filepath.Join(dir, "skills", "s", "SKILL.md"), "---\nname: s2\n---\n", 0o644)
		}, func(d *Definition) bool { return len(d.Skills) == 1 && d.Skills[0].Name == "s2" }},
		{"program removed", func() { os.Remove(filepath.Join(root, "agent", "a")) }, func(d *Definition) bool { return d.Program == "" }},
	}
	for _, st := range steps {
		tick()
		st.change()
		d := load(st.what)
		if !st.check(d) {
			t.Errorf("%s: not read again: %+v", st.what, d)
		}
		if again := load(st.what + ", again"); again != d {
			t.Errorf("%s: read again although unchanged since", st.what)
		}
	}
	tick()
	testkit.WriteFile(t, filepath.Join(dir, "abi"), "bogus\n", 0o644)
	if _, err := c.Load(root, abi.KindAgent, "a"); abi.Errno(err) != syscall.EINVAL {
		t.Errorf("invalid abi: %v", err)
	}
	if _, err := c.Load(root, abi.KindAgent, "a"); abi.Errno(err) != syscall.EINVAL {
		t.Errorf("invalid abi, again (an error is not kept as a definition): %v", err)
	}
	tick()
	testkit.WriteFile(t, filepath.Join(dir, "abi"), "text\n", 0o644)
	if d := load("abi fixed"); d.ABI != ABIText {
		t.Errorf("abi fixed: %q", d.ABI)
	}
}

// TestCacheFollowsTheModel: an agent without a program answered by its
// model's API is read again when the model's definition changes.
func TestCacheFollowsTheModel(t *testing.T) {
	cacheNow(t)
	root := t.TempDir()
	testkit.WriteFile(t, filepath.Join(root, "agent", "a.d", "model"), "fake/llm\n", 0o644)
	c := NewCache()
	d, err := c.Load(root, abi.KindAgent, "a")
	if err != nil || d.API != nil {
		t.Fatalf("without a model definition: %+v %v", d, err)
	}
	tick()
	mdir := filepath.Join(root, "model", "fake", "llm.d")
	testkit.WriteFile(t, filepath.Join(mdir, "api"), "openai-chat\n", 0o644)
	testkit.WriteFile(t, filepath.Join(mdir, "endpoint"), "http://127.0.0.1:1/v1\n", 0o644)
	testkit.WriteFile(t, filepath.Join(mdir, "model_id"), "m\n", 0o644)
	if d, err = c.Load(root, abi.KindAgent, "a"); err != nil || d.API == nil {
		t.Fatalf("after the model was defined: %+v %v", d, err)
	}
	tick()
	testkit.WriteFile(t, filepath.Join(mdir, "model_id"), "n\n", 0o644)
	if d, err = c.Load(root, abi.KindAgent, "a"); err != nil || d.API == nil || d.API.Config.ModelID != "n" {
		t.Fatalf("after the model's model_id changed: %+v %v", d, err)
	}
}

// TestCacheKeepsNoRacyDefinition: a definition whose files changed within
// the filesystem clock's uncertainty is read again every time, until its
// files are older than that.
func TestCacheKeepsNoRacyDefinition(t *testing.T) {
	root := t.TempDir()
	testkit.WriteFile(t, filepath.Join(root, "agent", "a.d", "cwd"), "/x\n", 0o644)
	c := NewCache()
	d1, err := c.Load(root, abi.KindAgent, "a")
	if err != nil {
		t.Fatal(err)
	}
	if d2, _ := c.Load(root, abi.KindAgent, "a"); d2 == d1 {
		t.Fatalf("a definition written just now was kept")
	}
	// Past the window (a short one here) it is kept.
	racyFor(t, 100*time.Millisecond)
	time.Sleep(racyWindow + 50*time.Millisecond)
	d3, err := c.Load(root, abi.KindAgent, "a")
	if err != nil {
		t.Fatal(err)
	}
	if d4, _ := c.Load(root, abi.KindAgent, "a"); d4 != d3 {
		t.Fatalf("a definition older than the window was not kept")
	}
}
