package layout

import (
	"strconv"
	"strings"

	"github.com/ctxfs/ctxfs/abi"
)

// PlaceKind says what a path of the tree is, by the rules of SPEC sections
// 2, 3, 5 and 9. The tree seen through the mounts and the store share these
// paths ("home/1000/agent/coder/session/default/state").
type PlaceKind uint8

// Kinds of place. Each level of the tree allows only the names listed here.
const (
	PlaceInvalid      PlaceKind = iota // a name the ABI does not allow here: EPERM to create, ENOENT to look up
	PlaceBadName                       // a slot that takes a name, given an invalid one: EINVAL
	PlaceTop                           // "home" or "shared"
	PlaceHome                          // home/<uid>
	PlaceSpace                         // shared/<space>
	PlaceAgents                        // <home>/agent
	PlaceAgent                         // <home>/agent/<agent>
	PlaceModels                        // <home>/model
	PlaceProvider                      // <home>/model/<provider>
	PlaceModel                         // <home>/model/<provider>/<model>.d
	PlaceSessions                      // <container>/ (the session/ directory)
	PlaceIndex                         // <container>/index
	PlaceIndexList                     // index/list
	PlaceIndexCurrent                  // index/current
	PlaceIndexKeys                     // index/by-cwd, index/by-hash, index/by-uuid
	PlaceIndexEntry                    // index/<by-*>/<key>
	PlaceSession                       // <container>/<session>
	PlaceLog                           // messages.jsonl, events.jsonl: append only
	PlaceValue                         // state, cwd, meta.json: replaced whole
	PlaceReadOnly                      // latest.md, created_at, updated_at, AGENTS.md, SKILLS.md
	PlaceCtl                           // ctl: the control file
	PlaceFreeRoot                      // an agent's root/ or a session's context/
	PlaceFree                          // anything below a free root
	PlaceArchived                      // archived_sessions and everything below it: read only
	PlaceVersionsDir                   // a session's versions/ and versions/sha256/: read only
	PlaceVersion                       // versions/index.jsonl, versions/sha256/<hex>: read only, verified at open
)

// Place is what Classify found.
type Place struct {
	Kind      PlaceKind
	Home      string    // "home/<uid>" or "shared/<space>", when below one
	Container Container // for PlaceSessions and everything below it
	Session   string    // the session name, for PlaceSession and below
	File      string    // the session file name (PlaceLog, PlaceValue, PlaceReadOnly, PlaceCtl, context; versions/... below versions/)
	IndexKind string    // abi.IndexByCwd, abi.IndexByHash or abi.IndexByUUID
	Key       string    // the index entry key
}

// Ref is the session a place lies in.
func (p Place) Ref() Ref { return Ref{Container: p.Container, Name: p.Session} }

// IsDir reports whether the place is a directory of the ABI (free and
// archived places are whatever the store holds).
func (p Place) IsDir() bool {
	switch p.Kind {
	case PlaceTop, PlaceHome, PlaceSpace, PlaceAgents, PlaceAgent, PlaceModels,
		PlaceProvider, PlaceModel, PlaceSessions, PlaceIndex, PlaceIndexKeys,
		PlaceSession, PlaceFreeRoot, PlaceVersionsDir:
		return true
	}
	return false
}

// Exists reports whether the name is one the ABI allows (it may still be
// missing from the store).
func (p Place) Exists() bool { return p.Kind != PlaceInvalid && p.Kind != PlaceBadName }

// WritableIndex reports whether an index place may be written through the
// mount: current, by-hash/<key> and by-uuid/<uuid> (SPEC 9).
func (p Place) WritableIndex() bool {
	return p.Kind == PlaceIndexCurrent ||
		p.Kind == PlaceIndexEntry && (p.IndexKind == abi.IndexByHash || p.IndexKind == abi.IndexByUUID)
}

// IndexValueRel is the path of an index value (index/current, an entry of
// by-cwd/, by-hash/, by-uuid/), relative to the store.
func (p Place) IndexValueRel() string {
	dir := p.Container.Rel() + "/" + abi.ReservedSessionName
	if p.Kind == PlaceIndexCurrent {
		return dir + "/current"
	}
	return dir + "/" + p.IndexKind + "/" + p.Key
}

// sessionFiles maps each session file name to its kind.
var sessionFiles = map[string]PlaceKind{
	abi.FileMessages:  PlaceLog,
	abi.FileEvents:    PlaceLog,
	abi.FileState:     PlaceValue,
	abi.FileCwd:       PlaceValue,
	abi.FileMeta:      PlaceValue,
	abi.FileLatest:    PlaceReadOnly,
	abi.FileCreatedAt: PlaceReadOnly,
	abi.FileUpdatedAt: PlaceReadOnly,
	abi.FileAgentsMD:  PlaceReadOnly,
	abi.FileSkillsMD:  PlaceReadOnly,
	abi.FileCtl:       PlaceCtl,
	abi.DirContext:    PlaceFreeRoot,
}

// Classify says what rel (a path relative to the mount root and the store,
// without leading or trailing slashes) is. It does no I/O: whether the place
// exists is the store's business. Names starting with "." are never part
// of the ABI (the store keeps its seals and temporary files under them),
// except inside free trees.
func Classify(rel string) Place {
	rel = strings.Trim(rel, "/")
	var buf [classifyDepth]string
	parts := splitNames(rel, &buf)
	switch {
	case len(parts) == 1 && (parts[0] == "home" || parts[0] == "shared"):
		return Place{Kind: PlaceTop}
	case len(parts) < 2:
		return Place{}
	}
	home := rel[:len(parts[0])+1+len(parts[1])] // "home/<uid>" or "shared/<space>"
	switch parts[0] {
	case "home":
		return classifyHome(home, parts)
	case "shared":
		return classifyShared(home, parts)
	}
	return Place{}
}

// classifyDepth is how many names of a path Classify splits without
// allocating: it runs at every change the engine announces, and a
// session's files lie 7 names deep (docs/benchmarks.md#the-objects-of-a-send).
const classifyDepth = 12

// splitNames is strings.Split(rel, "/"), into buf when the names fit.
func splitNames(rel string, buf *[classifyDepth]string) []string {
	parts := buf[:0]
	for rest := rel; ; {
		if len(parts) == len(buf) {
			return strings.Split(rel, "/")
		}
		name, after, more := strings.Cut(rest, "/")
		parts = append(parts, name)
		if !more {
			return parts
		}
		rest = after
	}
}

// classifyHome: home/<uid>/{agent,model,archived_sessions}/...
func classifyHome(home string, parts []string) Place {
	if !validUid(parts[1]) {
		return Place{}
	}
	if len(parts) == 2 {
		return Place{Kind: PlaceHome, Home: home}
	}
	if parts[2] == abi.ArchivedDir {
		return classifyArchived(home, parts[3:])
	}
	return classifyHomeBody(home, parts[2:], true)
}

// classifyShared: shared/<space>/{agent,model}/...
func classifyShared(home string, parts []string) Place {
	if !abi.ValidName(parts[1]) {
		return badOrInvalid(parts[1])
	}
	if len(parts) == 2 {
		return Place{Kind: PlaceSpace, Home: home}
	}
	return classifyHomeBody(home, parts[2:], false)
}

// classifyHomeBody classifies what lies below a home or a space: parts
// starts at "agent" or "model". Only private homes have an agent root/.
func classifyHomeBody(home string, parts []string, private bool) Place {
	p := Place{Home: home}
	switch parts[0] {
	case abi.KindAgent:
		return classifyAgent(p, parts[1:], private)
	case abi.KindModel:
		return classifyModel(p, parts[1:])
	}
	return Place{}
}

// classifyAgent: agent/<agent>/{session,root}/...
func classifyAgent(p Place, parts []string, private bool) Place {
	if len(parts) == 0 {
		p.Kind = PlaceAgents
		return p
	}
	if !abi.ValidName(parts[0]) {
		return badOrInvalid(parts[0])
	}
	if len(parts) == 1 {
		p.Kind = PlaceAgent
		return p
	}
	switch {
	case parts[1] == "session":
		p.Container = Container{Home: p.Home, Kind: abi.KindAgent, Owner: parts[0]}
		return classifySessions(p, parts[2:])
	case parts[1] == "root" && private:
		p.Kind = PlaceFreeRoot
		if len(parts) > 2 {
			p.Kind = PlaceFree
		}
		return p
	}
	return Place{}
}

// classifyModel: model/<provider>/<model>.d/session/...
func classifyModel(p Place, parts []string) Place {
	switch {
	case len(parts) == 0:
		p.Kind = PlaceModels
		return p
	case !abi.ValidName(parts[0]):
		return badOrInvalid(parts[0])
	case len(parts) == 1:
		p.Kind = PlaceProvider
		return p
	}
	model, ok := strings.CutSuffix(parts[1], ".d")
	if !ok {
		return Place{}
	}
	if !abi.ValidName(model) {
		return badOrInvalid(parts[1])
	}
	if len(parts) == 2 {
		p.Kind = PlaceModel
		return p
	}
	if parts[2] != "session" {
		return Place{}
	}
	p.Container = Container{Home: p.Home, Kind: abi.KindModel, Owner: parts[0] + "/" + model}
	return classifySessions(p, parts[3:])
}

// classifySessions: session/{index,<session>}/...
func classifySessions(p Place, parts []string) Place {
	if len(parts) == 0 {
		p.Kind = PlaceSessions
		return p
	}
	if parts[0] == abi.ReservedSessionName {
		return classifyIndex(p, parts[1:])
	}
	if !abi.ValidSessionName(parts[0]) {
		return badOrInvalid(parts[0])
	}
	p.Session = parts[0]
	if len(parts) == 1 {
		p.Kind = PlaceSession
		return p
	}
	if parts[1] == abi.DirVersions {
		return classifyVersions(p, parts[1:])
	}
	kind, ok := sessionFiles[parts[1]]
	if !ok {
		return Place{}
	}
	p.File = parts[1]
	p.Kind = kind
	switch {
	case kind == PlaceFreeRoot && len(parts) > 2:
		p.Kind = PlaceFree
	case kind != PlaceFreeRoot && len(parts) > 2:
		return Place{}
	}
	return p
}

// classifyIndex: index/{list,current,by-cwd/<key>,by-hash/<key>,by-uuid/<uuid>}
func classifyIndex(p Place, parts []string) Place {
	if len(parts) == 0 {
		p.Kind = PlaceIndex
		return p
	}
	switch parts[0] {
	case "list", "current":
		if len(parts) > 1 {
			return Place{}
		}
		p.Kind = PlaceIndexList
		if parts[0] == "current" {
			p.Kind = PlaceIndexCurrent
		}
		return p
	case abi.IndexByCwd, abi.IndexByHash, abi.IndexByUUID:
	default:
		return Place{}
	}
	p.IndexKind = parts[0]
	if len(parts) == 1 {
		p.Kind = PlaceIndexKeys
		return p
	}
	if len(parts) > 2 {
		return Place{}
	}
	if !abi.ValidIndexKey(p.IndexKind, parts[1]) {
		return badOrInvalid(parts[1])
	}
	p.Kind, p.Key = PlaceIndexEntry, parts[1]
	return p
}

// classifyArchived: archived_sessions/<agent>/<session>/... is read only.
// Below the session directory the names are whatever was archived, except
// the store's hidden dot names.
func classifyArchived(home string, parts []string) Place {
	p := Place{Kind: PlaceArchived, Home: home}
	for i, name := range parts {
		switch {
		case strings.HasPrefix(name, "."):
			return Place{}
		case i == 0 && !abi.ValidName(name), i == 1 && !abi.ValidSessionName(name):
			return badOrInvalid(name)
		}
	}
	return p
}

// ArchiveDir reports whether rel is one of the archive's own directories,
// which a user makes before renaming a session into it (SPEC 12):
// home/<uid>/archived_sessions (agent "") or its directory of one agent.
// Unlike Classify, it says so whatever the uid and the agent's name are
// (a bad name, a dot name), and home and agent are as written: their
// judging is the caller's, after it has asked who owns the home (mkdir
// is EACCES in another uid's home before EINVAL for a bad agent name).
func ArchiveDir(rel string) (home, agent string, ok bool) {
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	if len(parts) < 3 || len(parts) > 4 || parts[0] != "home" || parts[2] != abi.ArchivedDir {
		return "", "", false
	}
	home = "home/" + parts[1]
	if len(parts) == 4 {
		agent = parts[3]
	}
	return home, agent, true
}

// badOrInvalid: a dot name is the store's own (hidden, never creatable by
// a user: EPERM); any other bad name in a name slot is EINVAL.
func badOrInvalid(name string) Place {
	if strings.HasPrefix(name, ".") {
		return Place{}
	}
	return Place{Kind: PlaceBadName}
}

// validUid accepts a uid written the way the kernel would print it.
func validUid(s string) bool {
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && strconv.FormatUint(n, 10) == s
}

// FreeTree reports whether rel is a free tree or in one: an agent's root/,
// a session's context/, or the context/ of an archived session (kept as
// its user left it).
func FreeTree(rel string) bool { return InFreeTree(rel, Classify(rel)) }

// InFreeTree is FreeTree for rel whose place is p.
func InFreeTree(rel string, p Place) bool {
	switch p.Kind {
	case PlaceFreeRoot, PlaceFree:
		return true
	case PlaceArchived:
		// home/<uid>/archived_sessions/<agent>/<session>/context/...
		parts := strings.SplitN(rel, "/", 7)
		return len(parts) >= 6 && parts[5] == abi.DirContext
	}
	return false
}

// classifyVersions: versions/{index.jsonl,sha256/<64 lowercase hex>}
// (SPEC 17); parts starts at "versions". Nothing else is a name there:
// the store's own files (the index's seal, temporary files) stay hidden.
func classifyVersions(p Place, parts []string) Place {
	p.File = strings.Join(parts, "/")
	switch {
	case len(parts) == 1, len(parts) == 2 && parts[1] == abi.DirVersionsContents:
		p.Kind = PlaceVersionsDir
	case len(parts) == 2 && parts[1] == abi.FileVersionsIndex,
		len(parts) == 3 && parts[1] == abi.DirVersionsContents && ValidContentName(parts[2]):
		p.Kind = PlaceVersion
	default:
		return Place{}
	}
	return p
}

// VersionsIndex is the File of a session's versions index.
const VersionsIndex = abi.DirVersions + "/" + abi.FileVersionsIndex

// ValidContentName reports whether name names a content of versions/:
// a SHA-256 in 64 lowercase hex digits.
func ValidContentName(name string) bool {
	return len(name) == 64 && strings.Trim(name, "0123456789abcdef") == ""
}
