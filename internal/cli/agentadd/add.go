package agentadd

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/mountinfo"
)

const Help = `Writes a definition under $CTX_ROOT/agent that runs a coding-agent CLI
(claude-code, codex, gemini or opencode; SPEC 16): agent/NAME, a symbolic link
to the CLI's executable (--path BIN, else the CLI's program found in PATH:
claude, codex, gemini, opencode), and agent/NAME.d/ with cli, isolation
(none, or chroot), and, when given, endpoint (the API base URL), model_id,
api_key_env (a variable of the server's environment) or api_key_file (an
absolute path of a root-owned file). Run it as root: definitions are root's,
and the executable must be changeable by root alone (EACCES otherwise). The
definition appears whole, by one rename; an existing agent NAME is EEXIST
unless --force, which replaces its program and its whole NAME.d/. It then
waits briefly for the server to make agent/NAME.sock and says whether it did.
Exit 0 added, 1 refused (ENOENT: no such executable; EEXIST; EACCES),
2 bad usage (EINVAL: a bad name, an unknown CLI, a relative path).
`

// socketWait is how long add waits for the server to make the socket: it
// does so at once, as it sees the definition.
const socketWait = client.SocketWait

// request is one `ctx agent add` command line, checked.
type request struct {
	name      string
	adapter   cli.Adapter
	path      string // --path, "" to look the program up in PATH
	isolation string
	force     bool
	files     map[string]string // control file -> its one line
}

// Add is `ctx agent add NAME --cli CLI [...]`.
func Add(e *clienv.Env, p *clienv.Parsed) int {
	r, err := parse(p)
	if err != nil {
		return clienv.Fail(e, "add", err, clienv.ExitUsage)
	}
	root := abi.RootFromEnv(e.Getenv)
	agents := filepath.Join(root, abi.KindAgent)
	bin, err := r.executable(e, agents)
	if err == nil {
		err = r.install(agents, bin)
	}
	if err != nil {
		return clienv.Fail(e, "add", err, clienv.ExitFailed)
	}
	fmt.Fprintf(e.Stdout, "added agent %s: %s -> %s (%s, mapped for version %s), isolation %s\n",
		r.name, filepath.Join(agents, r.name), bin, r.adapter.Name(), r.adapter.Version(), r.isolation)
	waitSocket(e, root, r.name)
	if r.isolation == "chroot" {
		if interp := interpreter(bin); interp != "" {
			fmt.Fprintf(e.Stderr, "ctx: add: note: %s is a script run by %s, which must then be in each uid's root/ (for Codex, give --path its native binary)\n", bin, interp)
		}
		fmt.Fprintf(e.Stdout, "next, for each uid that will use it: examples/cli-agent/prepare-root.sh --root %s --cli %s UID %s\n", root, r.adapter.Name(), r.name)
	}
	return clienv.ExitOK
}

// envName is what api_key_env may hold: a variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parse checks the command line; every refusal is EINVAL, before anything
// is looked at on disk.
func parse(p *clienv.Parsed) (*request, error) {
	r := &request{name: p.Args[0], path: p.Str("path"), isolation: p.Str("isolation"), force: p.On("force"), files: map[string]string{}}
	if err := abi.CheckName("agent", r.name); err != nil {
		return nil, err
	}
	a, err := cli.Lookup(p.Str("cli"))
	if p.Str("cli") == "" {
		return nil, abi.Errorf(syscall.EINVAL, "", "--cli CLI is required: %s", strings.Join(cli.Names(), ", "))
	}
	if err != nil {
		return nil, abi.Errorf(syscall.EINVAL, "", "--cli %q is not a CLI ctxfs knows: %s", p.Str("cli"), strings.Join(cli.Names(), ", "))
	}
	r.adapter = a
	r.files["cli"] = a.Name()
	if r.path != "" && !filepath.IsAbs(r.path) {
		return nil, abi.Errorf(syscall.EINVAL, "", "--path %q is not an absolute path", r.path)
	}
	switch r.isolation {
	case "":
		r.isolation = "none"
	case "none", "chroot":
	default:
		return nil, abi.Errorf(syscall.EINVAL, "", "--isolation %q is neither none nor chroot", r.isolation)
	}
	r.files["isolation"] = r.isolation
	return r, r.optionalFiles(p)
}

// optionalFiles checks --endpoint, --model and the key's source, each one
// line of its control file.
func (r *request) optionalFiles(p *clienv.Parsed) error {
	if v := p.Str("endpoint"); v != "" {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(v, " \t\r\n") {
			return abi.Errorf(syscall.EINVAL, "", "--endpoint %q is not an http(s) URL", v)
		}
		r.files["endpoint"] = v
	}
	if v := p.Str("model"); v != "" {
		if strings.ContainsFunc(v, func(c rune) bool { return c < ' ' || c == 0x7f }) {
			return abi.Errorf(syscall.EINVAL, "", "--model %q holds a control character", v)
		}
		r.files["model_id"] = v
	}
	keyEnv, keyFile := p.Str("api-key-env"), p.Str("api-key-file")
	switch {
	case keyEnv != "" && keyFile != "":
		return abi.Errorf(syscall.EINVAL, "", "--api-key-env and --api-key-file are exclusive")
	case keyEnv != "" && !envName.MatchString(keyEnv):
		return abi.Errorf(syscall.EINVAL, "", "--api-key-env %q is not a variable name", keyEnv)
	case keyFile != "" && !filepath.IsAbs(keyFile):
		return abi.Errorf(syscall.EINVAL, "", "--api-key-file %q is not an absolute path", keyFile)
	case keyEnv != "":
		r.files["api_key_env"] = keyEnv
	case keyFile != "":
		r.files["api_key_file"] = keyFile
	}
	return nil
}

// executable checks that the caller may write definitions (root, or the
// owner of agent/), finds the CLI's executable and returns its real path,
// checked to be changeable by no one but root and that owner.
func (r *request) executable(e *clienv.Env, agents string) (string, error) {
	owner, err := definitionsOwner(agents, e.Uid)
	if err != nil {
		return "", err
	}
	bin := r.path
	if bin == "" {
		if bin, err = lookPath(r.adapter.Program(), e.Getenv("PATH")); err != nil {
			return "", err
		}
	}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "", abi.Errorf(abi.Errno(err), "", "%s: %v", bin, unwrapPath(err))
	}
	st, err := os.Stat(real)
	switch {
	case err != nil:
		return "", abi.Errorf(abi.Errno(err), "", "%s: %v", real, unwrapPath(err))
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return "", abi.Errorf(syscall.EACCES, "", "%s is not an executable file", real)
	}
	return real, clienv.OthersCanChange(real, owner)
}

// definitionsOwner is the uid that owns agent/ (root, or a server's own
// user), refusing (EACCES) any other caller: the server runs what a
// definition says for every user.
func definitionsOwner(agents string, caller int) (uint32, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(agents, &st); err != nil {
		return 0, abi.Errorf(abi.Errno(err), "", "%s: %v (is ctxfs mounted there? ctxfs mount --root %s)", agents, err, filepath.Dir(agents))
	}
	if caller != 0 && uint32(caller) != st.Uid {
		return 0, abi.Errorf(syscall.EACCES, "", "definitions are root's: run ctx agent add as root (%s belongs to uid %d, you are uid %d)", agents, st.Uid, caller)
	}
	return st.Uid, nil
}

// lookPath finds program in the directories of path, as a shell would:
// ENOENT naming it, with how to install it, when none has it.
func lookPath(program, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // a relative PATH entry would name another file for the server
		}
		p := filepath.Join(dir, program)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", abi.Errorf(syscall.ENOENT, "", "%s: not found in PATH (install the CLI, see docs/clis.md, or give --path BIN)", program)
}

// unwrapPath is a path error's errno text alone: the message names the path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// waitSocket waits up to socketWait for the server to make the agent's
// socket, when a server serves the root, and says what it saw.
func waitSocket(e *clienv.Env, root, name string) {
	sock := abi.SocketPath(root, abi.KindAgent, name)
	if !served(root) {
		fmt.Fprintf(e.Stdout, "no server serves %s now: its socket appears once one does (ctxfs mount --root %s)\n", root, root)
		return
	}
	deadline := time.Now().Add(socketWait)
	for !clienv.IsSocket(sock) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if clienv.IsSocket(sock) {
		fmt.Fprintf(e.Stdout, "the server answers at %s\n", sock)
		return
	}
	fmt.Fprintf(e.Stderr, "ctx: add: warning: %s did not appear within %v; ctx doctor says why\n", sock, socketWait)
}

// served reports whether a ctxfs mount is on root/home.
func served(root string) bool {
	mounts, err := mountinfo.Read()
	if err != nil {
		return false
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, "home"))
	if err != nil {
		return false
	}
	m, ok := mountinfo.Top(mounts, real)
	return ok && m.FSType == mountinfo.FSTypeCtxfs
}

// interpreter is the #! line of a script, "" for anything else.
func interpreter(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 128)
	n, _ := f.Read(head)
	line, _, _ := strings.Cut(string(head[:n]), "\n")
	if !strings.HasPrefix(line, "#!") {
		return ""
	}
	return strings.TrimSpace(line[2:])
}
