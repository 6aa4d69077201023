package session

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// FsckReport receives fsck's findings as they come.
type FsckReport struct {
	Problem  func(path, what string) // one line per problem
	Repaired func(path, what string) // --repair: what was cut
	Progress func(done, total int)   // after each session
}

// sessionGlobs find every session directory of a store, live and archived.
var sessionGlobs = []string{
	"home/*/agent/*/session/*",
	"home/*/model/*/*.d/session/*",
	"shared/*/agent/*/session/*",
	"shared/*/model/*/*.d/session/*",
	"home/*/archived_sessions/*/*",
}

// SessionDirs lists the session directories of a store, sorted.
func SessionDirs(store string) []string {
	var dirs []string
	for _, g := range sessionGlobs {
		m, _ := filepath.Glob(filepath.Join(store, g))
		for _, d := range m {
			if filepath.Base(d) == abi.ReservedSessionName || strings.HasPrefix(filepath.Base(d), ".") {
				continue
			}
			if st, err := os.Lstat(d); err == nil && st.IsDir() {
				dirs = append(dirs, d)
			}
		}
	}
	sort.Strings(dirs)
	return dirs
}

// Fsck re-verifies every session of a store from scratch (SPEC section 6):
// each log against its seal, line by line, and each single-value file. It
// changes nothing unless repair is set, and then only cuts torn final
// appends, reporting each. It returns the number of problems left.
func Fsck(store string, repair bool, r FsckReport) int {
	dirs := SessionDirs(store)
	problems := 0
	for i, dir := range dirs {
		problems += fsckSession(dir, repair, r)
		if r.Progress != nil {
			r.Progress(i+1, len(dirs))
		}
	}
	return problems
}

func fsckSession(dir string, repair bool, r FsckReport) int {
	n := 0
	report := func(path, what string) {
		n++
		if r.Problem != nil {
			r.Problem(path, what)
		}
	}
	for _, f := range []string{abi.FileMessages, abi.FileEvents} {
		logPath, seal := filepath.Join(dir, f), sealPath(dir, f)
		for _, p := range sealedlog.Verify(logPath, seal) {
			if repair && p.Repairable {
				if what, err := sealedlog.Repair(logPath, seal); err == nil {
					if r.Repaired != nil {
						r.Repaired(p.Path, what)
					}
					continue
				}
			}
			report(p.Path, p.What)
		}
	}
	for name, check := range valueChecks {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if err != nil {
			if !(name == abi.FileState && os.IsNotExist(err)) { // a missing state is an old session
				report(p, "unreadable: "+err.Error())
			}
			continue
		}
		if what := check(b); what != "" {
			report(p, what)
		}
	}
	return n
}

var digits = regexp.MustCompile(`^[0-9]+\n$`)

// valueChecks validate a session's single-value files and meta.json.
var valueChecks = map[string]func([]byte) string{
	abi.FileState: func(b []byte) string {
		if !strings.HasSuffix(string(b), "\n") || !abi.ValidState(strings.TrimSuffix(string(b), "\n")) {
			return "not a state: " + strings.TrimSpace(string(b))
		}
		return ""
	},
	abi.FileCwd: func(b []byte) string {
		if !strings.HasSuffix(string(b), "\n") || abi.CheckCwd(strings.TrimSuffix(string(b), "\n")) != nil {
			return "not an absolute cwd"
		}
		return ""
	},
	abi.FileCreatedAt: unixCheck,
	abi.FileUpdatedAt: unixCheck,
	abi.FileMeta: func(b []byte) string {
		if _, err := proto.ParseObject(b, true); err != nil {
			return "not a JSON object: " + err.Error()
		}
		return ""
	},
}

func unixCheck(b []byte) string {
	if !digits.Match(b) {
		return "not Unix seconds"
	}
	return ""
}
