package layout

import (
	"slices"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

func TestClassify(t *testing.T) {
	const s = "home/1000/agent/coder/session"
	const m = "home/1000/model/openai/gpt-4.d/session"
	agent := Container{Home: "home/1000", Kind: abi.KindAgent, Owner: "coder"}
	model := Container{Home: "home/1000", Kind: abi.KindModel, Owner: "openai/gpt-4"}
	shared := Container{Home: "shared/team", Kind: abi.KindAgent, Owner: "coder"}
	tests := []struct {
		rel  string
		want Place
	}{
		{"home", Place{Kind: PlaceTop}},
		{"shared", Place{Kind: PlaceTop}},
		{"other", Place{}},
		{"home/1000", Place{Kind: PlaceHome, Home: "home/1000"}},
		{"home/01000", Place{}},
		{"home/alice", Place{}},
		{"home/1000/history", Place{}},
		{"home/1000/memory", Place{}},
		{"home/1000/context", Place{}},
		{"home/1000/agent", Place{Kind: PlaceAgents, Home: "home/1000"}},
		{"home/1000/agent/coder", Place{Kind: PlaceAgent, Home: "home/1000"}},
		{"home/1000/agent/bad name", Place{Kind: PlaceBadName}},
		{"home/1000/agent/x.sock", Place{Kind: PlaceBadName}},
		{"home/1000/agent/.hidden", Place{}},
		{"home/1000/agent/coder/notes", Place{}},
		{"home/1000/agent/coder/root", Place{Kind: PlaceFreeRoot, Home: "home/1000"}},
		{"home/1000/agent/coder/root/a/.b/c", Place{Kind: PlaceFree, Home: "home/1000"}},
		{s, Place{Kind: PlaceSessions, Home: "home/1000", Container: agent}},
		{s + "/index", Place{Kind: PlaceIndex, Home: "home/1000", Container: agent}},
		{s + "/index/list", Place{Kind: PlaceIndexList, Home: "home/1000", Container: agent}},
		{s + "/index/current", Place{Kind: PlaceIndexCurrent, Home: "home/1000", Container: agent}},
		{s + "/index/other", Place{}},
		{s + "/index/list/x", Place{}},
		{s + "/index/by-cwd", Place{Kind: PlaceIndexKeys, Home: "home/1000", Container: agent, IndexKind: abi.IndexByCwd}},
		{s + "/index/by-cwd/cwd-0123456789abcdef", Place{Kind: PlaceIndexEntry, Home: "home/1000", Container: agent, IndexKind: abi.IndexByCwd, Key: "cwd-0123456789abcdef"}},
		{s + "/index/by-cwd/cwd-0123", Place{Kind: PlaceBadName}},
		{s + "/index/by-hash/abc123", Place{Kind: PlaceIndexEntry, Home: "home/1000", Container: agent, IndexKind: abi.IndexByHash, Key: "abc123"}},
		{s + "/index/by-hash/-x", Place{Kind: PlaceBadName}},
		{s + "/index/by-uuid/123e4567-e89b-12d3-a456-426614174000", Place{Kind: PlaceIndexEntry, Home: "home/1000", Container: agent, IndexKind: abi.IndexByUUID, Key: "123e4567-e89b-12d3-a456-426614174000"}},
		{s + "/index/by-uuid/123E4567-E89B-12D3-A456-426614174000", Place{Kind: PlaceBadName}},
		{s + "/default", Place{Kind: PlaceSession, Home: "home/1000", Container: agent, Session: "default"}},
		{s + "/bad!", Place{Kind: PlaceBadName}},
		{s + "/.tmp", Place{}},
		{s + "/default/messages.jsonl", Place{Kind: PlaceLog, Home: "home/1000", Container: agent, Session: "default", File: "messages.jsonl"}},
		{s + "/default/events.jsonl", Place{Kind: PlaceLog, Home: "home/1000", Container: agent, Session: "default", File: "events.jsonl"}},
		{s + "/default/state", Place{Kind: PlaceValue, Home: "home/1000", Container: agent, Session: "default", File: "state"}},
		{s + "/default/cwd", Place{Kind: PlaceValue, Home: "home/1000", Container: agent, Session: "default", File: "cwd"}},
		{s + "/default/meta.json", Place{Kind: PlaceValue, Home: "home/1000", Container: agent, Session: "default", File: "meta.json"}},
		{s + "/default/latest.md", Place{Kind: PlaceReadOnly, Home: "home/1000", Container: agent, Session: "default", File: "latest.md"}},
		{s + "/default/created_at", Place{Kind: PlaceReadOnly, Home: "home/1000", Container: agent, Session: "default", File: "created_at"}},
		{s + "/default/updated_at", Place{Kind: PlaceReadOnly, Home: "home/1000", Container: agent, Session: "default", File: "updated_at"}},
		{s + "/default/AGENTS.md", Place{Kind: PlaceReadOnly, Home: "home/1000", Container: agent, Session: "default", File: "AGENTS.md"}},
		{s + "/default/SKILLS.md", Place{Kind: PlaceReadOnly, Home: "home/1000", Container: agent, Session: "default", File: "SKILLS.md"}},
		{s + "/default/ctl", Place{Kind: PlaceCtl, Home: "home/1000", Container: agent, Session: "default", File: "ctl"}},
		{s + "/default/context", Place{Kind: PlaceFreeRoot, Home: "home/1000", Container: agent, Session: "default", File: "context"}},
		{s + "/default/context/x/y", Place{Kind: PlaceFree, Home: "home/1000", Container: agent, Session: "default", File: "context"}},
		{s + "/default/notes.txt", Place{}},
		{s + "/default/versions", Place{Kind: PlaceVersionsDir, Home: "home/1000", Container: agent, Session: "default", File: "versions"}},
		{s + "/default/versions/index.jsonl", Place{Kind: PlaceVersion, Home: "home/1000", Container: agent, Session: "default", File: "versions/index.jsonl"}},
		{s + "/default/versions/sha256", Place{Kind: PlaceVersionsDir, Home: "home/1000", Container: agent, Session: "default", File: "versions/sha256"}},
		{s + "/default/versions/sha256/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Place{Kind: PlaceVersion, Home: "home/1000", Container: agent, Session: "default", File: "versions/sha256/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
		{s + "/default/versions/sha256/0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF", Place{}},
		{s + "/default/versions/sha256/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef/x", Place{}},
		{s + "/default/versions/.seal", Place{}},
		{s + "/default/versions/other", Place{}},
		{s + "/default/.seal", Place{}},
		{s + "/default/.seal/x", Place{}},
		{s + "/default/state/x", Place{}},
		{"home/1000/model", Place{Kind: PlaceModels, Home: "home/1000"}},
		{"home/1000/model/openai", Place{Kind: PlaceProvider, Home: "home/1000"}},
		{"home/1000/model/openai/gpt-4.d", Place{Kind: PlaceModel, Home: "home/1000"}},
		{"home/1000/model/openai/gpt-4", Place{}},
		{"home/1000/model/openai/gpt-4.d/root", Place{}},
		{m, Place{Kind: PlaceSessions, Home: "home/1000", Container: model}},
		{m + "/s1/state", Place{Kind: PlaceValue, Home: "home/1000", Container: model, Session: "s1", File: "state"}},
		{"home/1000/archived_sessions", Place{Kind: PlaceArchived, Home: "home/1000"}},
		{"home/1000/archived_sessions/coder/old/messages.jsonl", Place{Kind: PlaceArchived, Home: "home/1000"}},
		{"home/1000/archived_sessions/coder/old/.seal", Place{}},
		{"home/1000/archived_sessions/coder/index", Place{Kind: PlaceBadName}},
		{"shared/team", Place{Kind: PlaceSpace, Home: "shared/team"}},
		{"shared/bad name", Place{Kind: PlaceBadName}},
		{"shared/team/history", Place{}},
		{"shared/team/archived_sessions", Place{}},
		{"shared/team/agent/coder/root", Place{}},
		{"shared/team/agent/coder/session/s/cwd", Place{Kind: PlaceValue, Home: "shared/team", Container: shared, Session: "s", File: "cwd"}},
	}
	for _, tt := range tests {
		if got := Classify(tt.rel); got != tt.want {
			t.Errorf("Classify(%q) = %+v, want %+v", tt.rel, got, tt.want)
		}
	}
}

func TestClassifyContainerAgrees(t *testing.T) {
	for _, rel := range []string{
		"home/1000/agent/coder/session/default/state",
		"home/1000/model/openai/gpt-4.d/session/index/list",
		"shared/team/agent/coder/session",
	} {
		p := Classify(rel)
		c, _, ok := ParseContainerRel(rel)
		if !ok || c != p.Container {
			t.Errorf("%s: Classify container %+v, ParseContainerRel %+v %v", rel, p.Container, c, ok)
		}
	}
}

func TestPlaceHelpers(t *testing.T) {
	if !Classify("home/1/agent/a/session/index/current").WritableIndex() {
		t.Error("current not writable")
	}
	if Classify("home/1/agent/a/session/index/by-cwd/cwd-0123456789abcdef").WritableIndex() {
		t.Error("by-cwd writable")
	}
	if !Classify("home/1/agent/a/session/index/by-uuid/123e4567-e89b-12d3-a456-426614174000").WritableIndex() {
		t.Error("by-uuid not writable")
	}
	r := Classify("home/1/agent/a/session/s/state").Ref()
	if r.Rel() != "home/1/agent/a/session/s" {
		t.Errorf("Ref().Rel() = %q", r.Rel())
	}
}

// ArchiveDir names the archive's own directories whatever their names
// (mkdir judges the uid and the agent's name after the home's owner), and
// nothing else: not a session in the archive, not another home's body.
func TestArchiveDir(t *testing.T) {
	for _, c := range []struct {
		rel         string
		home, agent string
		ok          bool
	}{
		{"home/1000/archived_sessions", "home/1000", "", true},
		{"home/1000/archived_sessions/coder", "home/1000", "coder", true},
		{"home/1000/archived_sessions/.x", "home/1000", ".x", true},
		{"home/1000/archived_sessions/bad name", "home/1000", "bad name", true},
		{"home/alice/archived_sessions", "home/alice", "", true},
		{"home/1000/archived_sessions/coder/s1", "", "", false},
		{"home/1000/agent", "", "", false},
		{"home/1000", "", "", false},
		{"shared/team/archived_sessions", "", "", false},
		{"home/1000/agent/archived_sessions", "", "", false},
	} {
		home, agent, ok := ArchiveDir(c.rel)
		if home != c.home || agent != c.agent || ok != c.ok {
			t.Errorf("ArchiveDir(%q) = %q, %q, %v; want %q, %q, %v", c.rel, home, agent, ok, c.home, c.agent, c.ok)
		}
	}
}

// TestSplitNamesAsSplit: Classify's split is strings.Split's, below its
// depth and beyond it.
func TestSplitNamesAsSplit(t *testing.T) {
	for _, rel := range []string{"", "a", "a/b", "a//b", "home/1000/agent/x/session/s/messages.jsonl",
		strings.Repeat("n/", classifyDepth-1) + "n", strings.Repeat("n/", classifyDepth) + "n", strings.Repeat("x/", 40)} {
		var buf [classifyDepth]string
		if got, want := splitNames(rel, &buf), strings.Split(rel, "/"); !slices.Equal(got, want) {
			t.Errorf("splitNames(%q) = %q, want %q", rel, got, want)
		}
	}
}
