package abi

import "time"

// Session states, as written to the state file (plus "\n").
const (
	StateIdle      = "idle"
	StateActive    = "active"
	StateDone      = "done"
	StateError     = "error"
	StateCancelled = "cancelled"
)

// ValidState reports whether s is one of the five states.
func ValidState(s string) bool {
	switch s {
	case StateIdle, StateActive, StateDone, StateError, StateCancelled:
		return true
	}
	return false
}

// Scopes of a session.
const (
	ScopePrivate = "private"
	ScopeShared  = "shared"
	ScopeTemp    = "temp"
)

// ValidScope reports whether s is a scope.
func ValidScope(s string) bool {
	return s == ScopePrivate || s == ScopeShared || s == ScopeTemp
}

// Limits.
const (
	MaxLineBytes    = 1 << 20 // a log line, without its newline
	MaxRequestBytes = 1 << 20 // a request line, without its newline
)

// Session file names, as they appear in a session directory.
const (
	FileMessages  = "messages.jsonl"
	FileEvents    = "events.jsonl"
	FileLatest    = "latest.md"
	FileState     = "state"
	FileCwd       = "cwd"
	FileCreatedAt = "created_at"
	FileUpdatedAt = "updated_at"
	FileMeta      = "meta.json"
	FileAgentsMD  = "AGENTS.md"
	FileSkillsMD  = "SKILLS.md"
	DirContext    = "context"
	FileCtl       = "ctl"
	// The file versions (SPEC 17): versions/index.jsonl and each content
	// under versions/sha256/, named by its SHA-256 in lowercase hex.
	DirVersions         = "versions"
	FileVersionsIndex   = "index.jsonl"
	DirVersionsContents = "sha256"
)

// DefaultSession is the session used when none is named.
const DefaultSession = "default"

// TS formats a time as the logs write it: RFC 3339, UTC, milliseconds.
func TS(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
