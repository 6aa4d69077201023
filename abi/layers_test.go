package abi

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/ctxfs/ctxfs/"

// layerRules are the design card's rooms and what each must never import
// (a room is a package path and every package below it). Imports run
// down: the engine (session, agent and the libraries it uses) never
// knows how it is served (fs, server, cluster) or who asks (client, the
// CLI, the commands); fs and server translate requests into engine calls
// and never each other; the client side reaches the server only through
// the mount and the sockets, never through the engine's state (it may
// read definitions with the server's own loader, agent/def, so that `ctx
// agent list` and `ctx doctor` say what the server would take); and the
// vocabulary (abi, proto) and the store's door (internal/storefs) import
// almost nothing.
var layerRules = []struct {
	rooms, never []string
	why          string
}{
	{[]string{"session", "agent", "index", "search", "trajectory"},
		[]string{"fs", "server", "cluster", "client", "internal/cli", "cmd"},
		"the engine never knows how it is served or who asks"},
	{[]string{"fs"},
		[]string{"server", "cluster", "agent", "client", "internal/cli", "cmd"},
		"fs translates file operations into engine calls and decides no rule"},
	{[]string{"server"},
		[]string{"fs", "cluster", "client", "internal/cli", "cmd"},
		"server translates socket requests into engine calls"},
	{[]string{"client", "internal/cli"},
		[]string{"session", "fs", "server", "cluster", "index", "cmd"},
		"the client side talks to the server through the mount and the sockets"},
	{[]string{"abi", "proto"},
		[]string{"session", "agent", "index", "search", "trajectory", "fs", "server", "cluster", "client", "internal/cli", "internal/storefs", "cmd"},
		"the vocabulary every package shares depends on none of them"},
	{[]string{"internal/storefs"},
		[]string{""},
		"the store's door imports nothing of the module"},
	{[]string{"agent/trampoline"},
		[]string{"agent", "session", "index", "search", "trajectory", "fs", "server", "cluster", "client", "internal/cli", "internal/storefs", "cmd"},
		"the trampoline, root in a run's jail, takes its orders from its arguments alone"},
	{[]string{"agent/prompt"},
		[]string{"agent/provider", "agent/cli", "agent/tools", "agent/def", "session", "internal/storefs"},
		"the prompt is read from the log it is handed, and asks no model"},
}

// engineParts: the packages below the engine (session) and the agent
// runner (agent) each do one job for it and never import it (only
// session/importer, which serves a socket op with the engine's calls, is
// above it).
var engineParts = []struct{ engine, above string }{
	{"session", "session/importer"},
	{"agent", ""},
}

// inRoom reports whether pkg (a path inside the module) is room or below
// it; the room "" is every package.
func inRoom(pkg, room string) bool {
	return room == "" || pkg == room || strings.HasPrefix(pkg, room+"/")
}

// TestLayers: no non-test Go file of the module imports what its room
// must never import (layerRules), nor a part of the engine the engine
// (engineParts). Test files may: a test of the engine may well drive it
// through a mount.
func TestLayers(t *testing.T) {
	files := eachImport(t, func(rel, pkg, path string) {
		dep, ok := strings.CutPrefix(path, modulePath)
		if !ok {
			return
		}
		if why := forbidden(pkg, dep); why != "" {
			t.Errorf("%s imports %s: %s", rel, dep, why)
		}
	})
	if files < 100 {
		t.Fatalf("only %d Go files found: not the module root?", files)
	}
}

// eachImport calls fn with every import path of every non-test Go file of
// the module, the file's path (rel) and its package's (pkg) relative to
// the module's root; it returns how many files it read.
func eachImport(t *testing.T, fn func(rel, pkg, path string)) int {
	return eachModuleFile(t, "", func(rel, p string) {
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			fn(rel, pkg, path)
		}
	})
}

// forbidden is why pkg may not import dep, "" when it may.
func forbidden(pkg, dep string) string {
	for _, p := range engineParts {
		if dep == p.engine && pkg != p.engine && pkg != p.above && inRoom(pkg, p.engine) {
			return "a part of " + p.engine + " never imports it"
		}
	}
	for _, r := range layerRules {
		for _, room := range r.rooms {
			if !inRoom(pkg, room) {
				continue
			}
			for _, never := range r.never {
				if inRoom(dep, never) && !inRoom(dep, room) {
					return r.why
				}
			}
		}
	}
	return ""
}

// TestCtxLinksNoHTTPClient: no package of the module that ctx links
// imports an HTTP or TLS client. Their initialisation was a fifth of
// ctx's start, which every command and every shell completion pays
// (docs/benchmarks.md, "ctx's start"); ctx reads definitions (agent/def)
// and a model API's settings (agent/modelapi), never the client that
// calls a provider (agent/provider).
func TestCtxLinksNoHTTPClient(t *testing.T) {
	imports := map[string][]string{} // a module package → what its files import
	eachImport(t, func(_, pkg, path string) { imports[pkg] = append(imports[pkg], path) })
	importedBy := map[string]string{"cmd/ctx": ""}
	for queue := []string{"cmd/ctx"}; len(queue) > 0; queue = queue[1:] {
		pkg := queue[0]
		for _, path := range imports[pkg] {
			if path == "net/http" || strings.HasPrefix(path, "net/http/") || path == "crypto/tls" {
				t.Errorf("ctx links %s, imported by %s", path, chain(importedBy, pkg))
			}
			dep, ok := strings.CutPrefix(path, modulePath)
			if _, seen := importedBy[dep]; !ok || seen {
				continue
			}
			importedBy[dep] = pkg
			queue = append(queue, dep)
		}
	}
	if len(importedBy) < 10 {
		t.Fatalf("ctx links only %d packages of the module: not the module root?", len(importedBy))
	}
}

// chain is how ctx comes to link pkg: "pkg ← importer ← … ← cmd/ctx".
func chain(importedBy map[string]string, pkg string) string {
	s := pkg
	for p := importedBy[pkg]; p != ""; p = importedBy[p] {
		s += " ← " + p
	}
	return s
}
