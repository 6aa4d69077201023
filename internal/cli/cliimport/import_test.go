package cliimport

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestSessionFiles: a directory is walked for the CLI's file names only
// (Claude Code's subagent files are parts of their parent's session); a
// file named is taken as it is.
func TestSessionFiles(t *testing.T) {
	dir := t.TempDir()
	const id = "4bc00285-d2db-45dd-8cc8-3e3ba6199b24"
	for _, f := range []string{
		"-tmp-a/" + id + ".jsonl",
		"-tmp-a/" + id + "/subagents/agent-1.jsonl",
		"-tmp-a/subagents/" + id + ".jsonl",
		"-tmp-a/notes.jsonl",
		"2026/12/02/rollout-2026-12-02T00-01-25-" + id + ".jsonl",
		"2026/12/02/other.jsonl",
	} {
		testkit.Must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(dir, f), nil, 0o644))
	}
	got, err := sessionFiles("claude-code", dir)
	testkit.Must(t, err)
	if want := []string{filepath.Join(dir, "-tmp-a", id+".jsonl")}; !reflect.DeepEqual(got, want) {
		t.Errorf("claude-code: %v, want %v", got, want)
	}
	got, err = sessionFiles("codex", dir)
	testkit.Must(t, err)
	rollout := filepath.Join(dir, "2026/12/02/rollout-2026-12-02T00-01-25-"+id+".jsonl")
	if !reflect.DeepEqual(got, []string{rollout}) {
		t.Errorf("codex: %v", got)
	}
	if got, _ := sessionFiles("codex", filepath.Join(dir, "-tmp-a/notes.jsonl")); len(got) != 1 {
		t.Errorf("a file named: %v", got)
	}
	if day := rolloutDay(filepath.Base(rollout)); day != "2026/12/02" {
		t.Errorf("rolloutDay: %s", day)
	}
	if p := projectDir("/tmp/cc/work.d"); p != "-tmp-cc-work-d" {
		t.Errorf("projectDir: %s", p)
	}
}
