package def

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// EchoModel is the built-in model that answers by echoing the input.
const EchoModel = "debug/echo"

// Output ABIs and isolation modes a definition may name.
const (
	ABIJSONL        = "jsonl"
	ABIText         = "text"
	IsolationNone   = "none"
	IsolationChroot = "chroot"
)

// maxControlFile bounds what Load reads of any one control file or
// AGENTS.md: a definition is configuration, not data, and a runaway file
// must not be slurped into every run.
const maxControlFile = 1 << 20

// maxTimeout is the longest timeout a definition may ask for (one year);
// beyond it the value is surely a typo, and time.Duration would overflow.
const maxTimeout = 365 * 24 * time.Hour

// Definition is one agent or model, as read from its host directory.
type Definition struct {
	Kind      string        // abi.KindAgent or abi.KindModel
	Name      string        // agent name, or "provider/model"
	Dir       string        // the NAME.d host directory ("" for the built-in debug/echo)
	Program   string        // the executable beside Dir, "" if none
	Cwd       string        // default cwd, "" if none
	Model     string        // "provider/model"; a model's own name; EchoModel when an agent names none
	ABI       string        // ABIJSONL or ABIText
	Env       []string      // KEY=VALUE lines, in file order
	Isolation string        // IsolationNone or IsolationChroot
	Timeout   time.Duration // 0 when none
	AgentsMD  string        // content of the global AGENTS.md, "" if none
	Skills    []Skill       // sorted by directory name
	// API is the built-in model API that answers a run: a model
	// definition's own, or, for an agent without a program, its model's.
	API *API
	// CLI is a coding-agent CLI agent's (agent/NAME.d/cli), nil otherwise.
	CLI *CLIDef
	// Tools is the built-in tools a model API run offers (SPEC 17:
	// agent/NAME.d/tools, already limited by perm), in file order.
	Tools []string
	// Perm is agent/NAME.d/perm: letters of "rwx", default "r".
	Perm string
	// Steps is how many tool calls one run may make (default 32).
	Steps int
	// Approval is ApprovalAuto or ApprovalAsk.
	Approval string
	// ApprovalTimeout is how long a call waits for an answer (default 3600 s).
	ApprovalTimeout time.Duration
	// Children is agent/NAME.d/children set to allow: a child run of
	// this agent may start children of its own (SPEC 18).
	Children bool
	// WindowDef is window, compact and compact.strategy (SPEC 18).
	WindowDef WindowDef
	// Restore is set on a copy for a restore run (agent's toolrestore.go).
	Restore *Restore

	w *witness // while it loads: what it is read from (Cache)
}

// Skill is the metadata of one skills/<skill>/SKILL.md.
type Skill struct {
	Name        string // front matter name, else the directory name
	Description string // front matter description, "" if none
	Path        string // host path of SKILL.md
}

// Echo reports whether the server answers this definition itself: there is
// no program and the model is the built-in debug/echo.
func (d *Definition) Echo() bool { return d.Program == "" && d.Model == EchoModel }

// AnsweredByAPI reports whether a built-in model API answers this
// definition's runs: it has no program and names one (its own, or its
// model's).
func (d *Definition) AnsweredByAPI() bool { return d.Program == "" && d.API != nil }

// Load reads the definition of an agent (kind "agent", name NAME) or a model
// (kind "model", name "provider/model") under root. A name that is not valid
// is EINVAL; an undefined one ENOENT (debug/echo is always defined); a
// control file with an invalid value EINVAL. (Cache.Load reads it again
// only when it changed.)
func Load(root, kind, name string) (*Definition, error) { return load(root, kind, name, nil) }

// load is Load, witnessing in w (when not nil) every path it reads.
func load(root, kind, name string, w *witness) (*Definition, error) {
	dir, prog, err := defPaths(root, kind, name)
	if err != nil {
		return nil, err
	}
	d := &Definition{Kind: kind, Name: name, Dir: dir, ABI: ABIJSONL, Isolation: IsolationNone, Model: EchoModel, w: w}
	defer func() { d.w = nil }()
	if kind == abi.KindModel {
		d.Model = name
	}
	if err := checkDir(root, kind, name, dir, w); err != nil {
		if kind == abi.KindModel && name == EchoModel && abi.Errno(err) == syscall.ENOENT {
			d.Dir = ""
			return d, nil
		}
		return nil, err
	}
	if d.Program, err = findProgram(prog, filepath.Join(root, kind), w); err != nil {
		return nil, err
	}
	if err := d.readControls(); err != nil {
		return nil, err
	}
	if kind == abi.KindAgent && d.Program == "" && d.Model != EchoModel && d.CLI == nil {
		if err := d.adoptModelAPI(root); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// adoptModelAPI gives an agent without a program its model's API. An
// undefined model, or one without an API, leaves the agent without an
// answerer, which its runs report; an invalid model definition is EINVAL
// now, naming its file.
func (d *Definition) adoptModelAPI(root string) error {
	m, err := load(root, abi.KindModel, d.Model, d.w)
	if abi.Errno(err) == syscall.ENOENT {
		return nil
	}
	if err != nil {
		return err
	}
	d.API = m.API
	if d.Timeout == 0 {
		d.Timeout = m.Timeout
	}
	return nil
}

// defPaths returns the NAME.d directory and the program path of a definition.
func defPaths(root, kind, name string) (dir, prog string, err error) {
	switch {
	case kind == abi.KindAgent && abi.ValidName(name), kind == abi.KindModel && abi.ValidModelName(name):
		prog = abi.DefinitionPath(root, kind, name)
	case kind == abi.KindAgent || kind == abi.KindModel:
		return "", "", abi.Errorf(syscall.EINVAL, "load", "invalid %s name %q", kind, name)
	default:
		return "", "", abi.Errorf(syscall.EINVAL, "load", "unknown definition kind %q", kind)
	}
	return prog + ".d", prog, nil
}

// checkDir is nil when dir is a directory that only root and the
// server's uid can change, and so can the directories between it and root
// (ownedByServer) and, when dir or a provider is a symlink, those on the
// way it leads (linksOwnedByServer); ENOENT when nothing (or not a directory) is there: a
// stray file named NAME.d defines nothing.
func checkDir(root, kind, name, dir string, w *witness) error {
	st, err := w.stat(dir)
	if err == nil && !st.IsDir() || errors.Is(err, fs.ErrNotExist) {
		return NotDefined(kind, name)
	}
	if err != nil {
		return abi.Wrap("load", err)
	}
	top := filepath.Join(root, kind) // ROOT/agent or ROOT/model, checked at mount too
	for p := dir; ; p = filepath.Dir(p) {
		if p != dir {
			if st, err = w.stat(p); err != nil {
				return abi.Wrap("load", err)
			}
		}
		if err := ownedByServer(p, st); err != nil {
			return err
		}
		if p == top || p == filepath.Dir(p) {
			return linksOwnedByServer(dir, top, w) // NAME.d may be a link
		}
	}
}

// NotDefined is the ENOENT of a definition whose NAME.d directory is not
// there: it names the definition, never the host path (the server sends
// it to whoever asked).
func NotDefined(kind, name string) error {
	return abi.Errorf(syscall.ENOENT, "", "%s %q is not defined", kind, name)
}

// Defined reports whether a definition's NAME.d directory is there
// (debug/echo is always defined): what the server keeps a socket for.
func Defined(root, kind, name string) bool {
	if kind == abi.KindModel && name == EchoModel {
		return true
	}
	dir, _, err := defPaths(root, kind, name)
	if err != nil {
		return false
	}
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// ownedByServer refuses (EACCES) a definition's directory or file that
// anyone besides root and the server's uid could change: the server runs
// what a definition says, sends its keys where it says, and starts root's
// helpers with its environment, so a definition is only what root wrote.
func ownedByServer(p string, fi os.FileInfo) error {
	st := ownership(fi)
	if st == nil {
		return nil
	}
	if who := storefs.AnyOtherWriter(st, uint32(os.Geteuid())); who != "" {
		return abi.Errorf(syscall.EACCES, "load", "%s is writable by %s, so the definition is refused: it must be root's alone; fix: chown root:root %s && chmod go-w %s", p, who, p, p)
	}
	return nil
}

// ownership is fi's owner, group and mode, what storefs's checks of
// writers read; nil when fi holds no stat.
func ownership(fi os.FileInfo) *unix.Stat_t {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return &unix.Stat_t{Uid: sys.Uid, Gid: sys.Gid, Mode: sys.Mode}
}

// findProgram returns prog when it is an executable regular file, "" when
// nothing is there. Something else at that path is EINVAL rather than
// silently ignored: falling back to echo would hide a broken install.
// top is a directory checked already (checkDir), where the walk up from
// prog's directory stops (linksOwnedByServer).
func findProgram(prog, top string, w *witness) (string, error) {
	st, err := w.stat(prog)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", abi.Wrap("load", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", abi.Errorf(syscall.EINVAL, "load", "program %s is not an executable file", prog)
	}
	if err := ownedByServer(prog, st); err != nil {
		return "", err
	}
	return prog, linksOwnedByServer(prog, top, w)
}

// isLink reports whether p is a symbolic link.
func isLink(p string) bool {
	st, err := os.Lstat(p)
	return err == nil && st.Mode()&fs.ModeSymlink != 0
}

// maxLinks bounds the symlinks linksOwnedByServer follows (the kernel's own
// limit, beyond which exec fails with ELOOP anyway).
const maxLinks = 40

// linksOwnedByServer refuses (EACCES) a program, a NAME.d or a file whose path
// goes through a directory that anyone besides root and the server's uid
// could change: every directory that holds a name the kernel passes
// while it resolves p, each link's target resolved the same way (ctx
// agent add writes agent/NAME as a link to the CLI's executable), except
// top and the directories above it (checked already: checkDir). Checking
// what the link leads to alone let whoever may write its directory
// rename root's executable away and put their own there between this
// check and the exec (every user's runs would run it), or put there a
// NAME.d of links to root's files elsewhere, or a control file that
// links to a file root alone may read; checking the directories above
// the path and above its resolved end still missed a directory holding
// a link met on the way (/a/l1 -> /c/l2: /c). A sticky directory is fine
// (storefs.OtherWriter): no one else may rename root's entries there.
// The last name itself is the caller's to check.
func linksOwnedByServer(p, top string, w *witness) error {
	if real, err := filepath.EvalSymlinks(top); err == nil {
		top = real // a NAME.d that is a link: checked already where it leads
	}
	way := ownedWay{top: top, w: w}
	_, err := way.resolve(p)
	return err
}

// ownedWay resolves a path as the kernel does, checking each directory
// it passes (dirOwnedByServer).
type ownedWay struct {
	top   string
	w     *witness
	links int // followed so far
}

// resolve returns where p leads, its links followed, once every directory
// holding a name on the way is checked. ".." is taken where the kernel
// takes it, from the directory reached (never lexically, which a link
// before it would make wrong).
func (o *ownedWay) resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", abi.Errorf(syscall.EINVAL, "load", "%s: not an absolute path", p)
	}
	cur := "/"
	for _, name := range strings.Split(p, "/") {
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		if err := o.dirOwnedByServer(cur); err != nil {
			return "", err
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", abi.Wrap("load", err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if o.links++; o.links > maxLinks {
			return "", abi.Errorf(syscall.ELOOP, "load", "%s: too many symbolic links", p)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", abi.Wrap("load", err)
		}
		if !filepath.IsAbs(target) {
			target = cur + "/" + target // not Join: its ".." are the kernel's
		}
		if cur, err = o.resolve(target); err != nil {
			return "", err
		}
	}
	return cur, nil
}

// dirOwnedByServer checks dir by storefs.OtherWriter, witnessing it (a
// chmod moves its ctime); top and the directories above it were checked.
func (o *ownedWay) dirOwnedByServer(dir string) error {
	if o.top != "" && (dir == o.top || strings.HasPrefix(o.top, dir) && (dir == "/" || o.top[len(dir)] == '/')) {
		return nil
	}
	st, err := o.w.stat(dir)
	if err != nil {
		return abi.Wrap("load", err)
	}
	ust := ownership(st)
	if ust == nil {
		return nil
	}
	if who := storefs.OtherWriter(ust, uint32(os.Geteuid())); who != "" {
		return abi.Errorf(syscall.EACCES, "load", "%s is writable by %s, so what is in it could be replaced and the definition is refused; fix: chown root:root %s && chmod go-w %s", dir, who, dir, dir)
	}
	return nil
}

// readControls reads every control file that is present.
func (d *Definition) readControls() error {
	steps := []func() error{d.readCwd, d.readModel, d.readABI, d.readEnv, d.readIsolation, d.readTimeout, d.readAgentsMD, d.readSkills, d.readAPI, d.readCLI, d.readToolSettings, d.readWindow}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Definition) readCwd() error {
	v, ok, err := d.oneLine("cwd")
	if !ok || err != nil {
		return err
	}
	if err := abi.CheckCwd(v); err != nil {
		return d.invalid("cwd", "%v", err.(*abi.Error).Msg)
	}
	d.Cwd = v
	return nil
}

// readModel reads an agent's model. A model definition is its own model, so
// a model file there is not consulted.
func (d *Definition) readModel() error {
	if d.Kind != abi.KindAgent {
		return nil
	}
	v, ok, err := d.oneLine("model")
	if !ok || err != nil {
		return err
	}
	if !abi.ValidModelName(v) {
		return d.invalid("model", "%q is not provider/model", v)
	}
	d.Model = v
	return nil
}

func (d *Definition) readABI() error { return d.readEither("abi", &d.ABI, ABIJSONL, ABIText) }

func (d *Definition) readIsolation() error {
	if err := d.readEither("isolation", &d.Isolation, IsolationNone, IsolationChroot); err != nil {
		return err
	}
	if d.Isolation == IsolationChroot && d.Kind != abi.KindAgent {
		return d.invalid("isolation", "a model has no chroot root/ to be confined to")
	}
	return nil
}

// readEither reads a file that holds one of two words into field; a
// missing file leaves field as it is.
func (d *Definition) readEither(file string, field *string, a, b string) error {
	v, ok, err := d.oneLine(file)
	if !ok || err != nil {
		return err
	}
	if v != a && v != b {
		return d.invalid(file, "%q is neither %s nor %s", v, a, b)
	}
	*field = v
	return nil
}

// readTimeout accepts whole seconds; 0 means no timeout.
func (d *Definition) readTimeout() error {
	v, ok, err := d.oneLine("timeout")
	if !ok || err != nil {
		return err
	}
	n, perr := strconv.ParseUint(v, 10, 64)
	if perr != nil || time.Duration(n) > maxTimeout/time.Second {
		return d.invalid("timeout", "%q is not a number of seconds up to %d", v, int64(maxTimeout/time.Second))
	}
	d.Timeout = time.Duration(n) * time.Second
	return nil
}

// readEnv reads KEY=VALUE lines. Blank lines and lines starting with '#'
// are skipped. CTX_* keys are refused: they are the server's account of the
// run, and a definition that could override them could lie to its program.
func (d *Definition) readEnv() error {
	data, ok, err := d.read("env")
	if !ok || err != nil {
		return err
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxControlFile+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, _, found := strings.Cut(line, "=")
		switch {
		case !found || !validEnvKey(key) || strings.IndexByte(line, 0) >= 0:
			return d.invalid("env", "line %d is not KEY=VALUE", n)
		case strings.HasPrefix(key, "CTX_"):
			return d.invalid("env", "line %d sets %s, which only the server sets", n, key)
		case seen[key]:
			return d.invalid("env", "line %d sets %s twice", n, key)
		}
		seen[key] = true
		d.Env = append(d.Env, line)
	}
	return nil
}

// validEnvKey is the portable shell variable name [A-Za-z_][A-Za-z0-9_]*.
func validEnvKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !alpha && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return k != ""
}

func (d *Definition) readAgentsMD() error {
	data, ok, err := d.read("AGENTS.md")
	if ok {
		d.AgentsMD = string(data)
	}
	return err
}

// readSkills lists skills/<skill>/SKILL.md. Skills are metadata for the
// SKILLS.md snapshot and grant nothing, so a skill directory without a
// SKILL.md, or with odd front matter, is skipped or taken as is, never an
// error that would stop the agent.
func (d *Definition) readSkills() error {
	skillsDir := filepath.Join(d.Dir, "skills")
	if _, err := d.w.stat(skillsDir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return abi.Wrap("load", err)
	}
	ents, err := os.ReadDir(skillsDir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	if err != nil {
		return abi.Wrap("load", err)
	}
	for _, e := range ents { // ReadDir sorts by name
		d.w.stat(filepath.Join(skillsDir, e.Name())) // SKILL.md coming or going
		p := filepath.Join(skillsDir, e.Name(), "SKILL.md")
		data, err := readBounded(p, d.Dir, d.w)
		if err != nil {
			continue
		}
		name, desc := frontMatter(data)
		if name == "" {
			name = e.Name()
		}
		d.Skills = append(d.Skills, Skill{Name: name, Description: desc, Path: p})
	}
	return nil
}

// frontMatter returns name and description from a leading "---" block of
// "key: value" lines; values may be quoted.
func frontMatter(data []byte) (name, desc string) {
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "---" {
		return "", ""
	}
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) == "---" {
			break
		}
		k, v, ok := strings.Cut(l, ":")
		v = unquote(strings.TrimSpace(v))
		switch strings.TrimSpace(k) {
		case "name":
			if ok {
				name = v
			}
		case "description":
			if ok {
				desc = v
			}
		}
	}
	return name, desc
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		if v[0] == '"' {
			if s, err := strconv.Unquote(v); err == nil {
				return s
			}
		}
		return v[1 : len(v)-1]
	}
	return v
}

// oneLine reads a one-line control file: its content without the final
// newline. ok is false when the file is absent. A second line, or an empty
// value, is EINVAL: a present but empty file is more likely a mistake than
// a wish for the default.
func (d *Definition) oneLine(file string) (v string, ok bool, err error) {
	data, ok, err := d.read(file)
	if !ok || err != nil {
		return "", ok, err
	}
	v = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	switch {
	case strings.ContainsAny(v, "\n\r"):
		return "", true, d.invalid(file, "more than one line")
	case v == "":
		return "", true, d.invalid(file, "empty value")
	}
	return v, true, nil
}

// read returns a control file's bytes; ok is false when it is absent.
func (d *Definition) read(file string) (data []byte, ok bool, err error) {
	data, err = readBounded(filepath.Join(d.Dir, file), d.Dir, d.w)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	return data, true, nil
}

// readBounded reads a regular file of at most maxControlFile bytes, and
// witnesses it in w (an absent file: its directory's witness covers it).
// The way to it from top, the definition's NAME.d, must be root's alone
// (linksOwnedByServer): a control file may be a link, and a directory
// another user may write on its way would let them put there a link to
// any file root alone may read.
func readBounded(p, top string, w *witness) ([]byte, error) {
	if filepath.Dir(p) != top || isLink(p) { // a file right in NAME.d: checkDir checked the way
		if err := linksOwnedByServer(p, top, w); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, abi.Wrap("load", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err == nil {
		w.saw(p, st, nil)
	}
	if err != nil || !st.Mode().IsRegular() {
		return nil, abi.Errorf(syscall.EINVAL, "load", "%s is not a regular file", p)
	}
	if err := ownedByServer(p, st); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxControlFile+1)); err != nil {
		return nil, abi.Wrap("load", err)
	}
	if b.Len() > maxControlFile {
		return nil, abi.Errorf(syscall.EINVAL, "load", "%s is over %d bytes", p, maxControlFile)
	}
	return b.Bytes(), nil
}

func (d *Definition) invalid(file, format string, args ...any) error {
	e := abi.Errorf(syscall.EINVAL, "load", format, args...)
	e.Path = filepath.Join(d.Dir, file)
	return e
}

// List returns the names of the defined agents (NAME.d directories under
// <root>/agent) and models ("provider/model" for provider/model.d under
// <root>/model, plus the built-in debug/echo), each sorted. Entries whose
// names are not valid are skipped: they could not be loaded anyway. A
// missing agent/ or model/ directory lists nothing.
func List(root string) (agents, models []string, err error) {
	if agents, err = defDirs(filepath.Join(root, "agent")); err != nil {
		return nil, nil, err
	}
	providers, err := subdirs(filepath.Join(root, "model"))
	if err != nil {
		return nil, nil, err
	}
	models = []string{EchoModel}
	for _, p := range providers {
		names, err := defDirs(filepath.Join(root, "model", p))
		if err != nil {
			return nil, nil, err
		}
		for _, m := range names {
			if full := p + "/" + m; full != EchoModel {
				models = append(models, full)
			}
		}
	}
	sort.Strings(agents)
	sort.Strings(models)
	return agents, models, nil
}

// Socket is a socket file under a root, and the definition its name is
// for.
type Socket struct {
	Kind, Name, Path string
}

// UndefinedSockets lists the sockets at ROOT/agent/NAME.sock and
// ROOT/model/PROVIDER/NAME.sock, for valid names, whose definition is not
// there (Defined): what a server that stopped left behind, or what a
// running one has not removed yet. A provider that is a symlink is not
// looked into: what is listed here may be removed, and only in the
// root's own directories.
func UndefinedSockets(root string) []Socket {
	out := undefinedSocketsIn(root, abi.KindAgent, "")
	models := filepath.Join(root, abi.KindModel)
	ents, _ := os.ReadDir(models) // none: no model sockets
	for _, e := range ents {
		if e.IsDir() { // from the entry's own type: a symlink is not a directory here
			out = append(out, undefinedSocketsIn(root, abi.KindModel, e.Name()+"/")...)
		}
	}
	return out
}

// undefinedSocketsIn is UndefinedSockets for the directory of kind whose
// names start with prefix ("" for agents, "PROVIDER/" for models).
func undefinedSocketsIn(root, kind, prefix string) []Socket {
	dir := abi.DefinitionPath(root, kind, prefix)
	ents, _ := os.ReadDir(dir)
	var out []Socket
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), abi.SocketSuffix)
		name := prefix + base
		valid := kind == abi.KindAgent && abi.ValidName(name) || kind == abi.KindModel && abi.ValidModelName(name)
		if ok && valid && e.Type() == fs.ModeSocket && !Defined(root, kind, name) {
			out = append(out, Socket{Kind: kind, Name: name, Path: filepath.Join(dir, e.Name())})
		}
	}
	return out
}

// defDirs returns X for every directory X.d in dir whose X is a valid name.
func defDirs(dir string) ([]string, error) {
	ents, err := subdirs(dir)
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e, ".d"); ok && abi.ValidName(n) {
			names = append(names, n)
		}
	}
	return names, err
}

// subdirs lists the directories (following symlinks) in dir; nil when dir
// does not exist.
func subdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, abi.Wrap("list", err)
	}
	var out []string
	for _, e := range ents {
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && st.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
