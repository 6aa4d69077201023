package abi

import "path/filepath"

// Kinds of definition and of session container: an agent or a model.
const (
	KindAgent = "agent"
	KindModel = "model"
)

// ArchivedDir is the directory of a home that holds its archived
// sessions, by agent (SPEC 2, 12).
const ArchivedDir = "archived_sessions"

// Index kinds: the directories of index/ that map keys to sessions (SPEC 9).
const (
	IndexByCwd  = "by-cwd"
	IndexByHash = "by-hash"
	IndexByUUID = "by-uuid"
)

// IndexKinds lists the index kinds in a fixed order.
var IndexKinds = []string{IndexByCwd, IndexByHash, IndexByUUID}

// ValidIndexKey reports whether key has the shape its index kind requires:
// a by-cwd key as CwdKey makes it, a canonical lowercase UUID for by-uuid, a
// name for by-hash. An unknown kind has no valid key.
func ValidIndexKey(kind, key string) bool {
	switch kind {
	case IndexByCwd:
		return ValidCwdKey(key)
	case IndexByHash:
		return ValidName(key)
	case IndexByUUID:
		return ValidUUID(key)
	}
	return false
}

// DefaultRoot is the mount root when CTX_ROOT is unset (SPEC section 1).
const DefaultRoot = "/ctx"

// RootFromEnv is the mount root both binaries use by default:
// getenv("CTX_ROOT"), else DefaultRoot.
func RootFromEnv(getenv func(string) string) string {
	if r := getenv("CTX_ROOT"); r != "" {
		return r
	}
	return DefaultRoot
}

// RootStore is the store of a server run by root (SPEC section 1).
const RootStore = "/var/lib/ctxfs"

// DefaultStore is the store both binaries assume for a server run by uid:
// getenv("CTXFS_STORE"), else RootStore for root and $XDG_DATA_HOME/ctxfs
// ($HOME/.local/share/ctxfs) for everyone else (SPEC section 1).
func DefaultStore(uid int, getenv func(string) string) string {
	if s := getenv("CTXFS_STORE"); s != "" {
		return s
	}
	if uid == 0 {
		return RootStore
	}
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "ctxfs")
	}
	return filepath.Join(getenv("HOME"), ".local", "share", "ctxfs")
}

// DefinitionPath is where a definition's program lives under the mount
// root: <root>/agent/NAME or <root>/model/PROVIDER/MODEL. Its control
// files are in the directory of the same path plus ".d" (SPEC 10), its
// socket at the same path plus ".sock" (SPEC 7). owner is an agent name or
// "provider/model", already validated.
func DefinitionPath(root, kind, owner string) string {
	return filepath.Join(root, kind, filepath.FromSlash(owner))
}

// SocketSuffix and DefinitionSuffix end the names of a definition's socket
// and of its directory of control files, beside its program.
const (
	SocketSuffix     = ".sock"
	DefinitionSuffix = ".d"
)

// SocketPath is the Unix socket of an agent or a model under the mount root.
func SocketPath(root, kind, owner string) string {
	return DefinitionPath(root, kind, owner) + SocketSuffix
}
