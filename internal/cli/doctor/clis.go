package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// versionWait bounds a CLI's --version: Gemini CLI starts node first.
const versionWait = 15 * time.Second

// npmPackages are the CLIs' npm packages, for the install command a fix
// names (docs/clis.md).
var npmPackages = map[string]string{
	cli.ClaudeCode: "@anthropic-ai/claude-code",
	cli.Codex:      "@openai/codex",
	cli.Gemini:     "@google/gemini-cli",
	cli.OpenCode:   "opencode-ai",
}

// versionNumber is the first dotted version in what --version prints
// ("2.1.332 (Claude Code)", "codex-cli 0.171.0").
var versionNumber = regexp.MustCompile(`\b(\d+)\.(\d+)\.(\d+)\b`)

// checkCLIs checks each agent that names a coding-agent CLI (SPEC 16):
// its executable is there and runs, and its --version is not older than
// the one its adapter's mapping was written against. The executable runs
// as the caller (ctx is never set-user-id), with a clean environment and a
// HOME of its own that is removed after, so that it reads and writes
// nothing of the caller's. Up to cliChecksAtOnce run at once (a CLI's
// --version starts node, a second or more each on a busy machine), and
// the findings keep the agents' order.
func (d *doctor) checkCLIs() {
	agents, _, err := def.List(d.root)
	if err != nil {
		return // checkDefinitions said so
	}
	var found []*finding
	var wg sync.WaitGroup
	turns := make(chan struct{}, cliChecksAtOnce)
	for _, name := range agents {
		dir := abi.DefinitionPath(d.root, abi.KindAgent, name)
		b, err := os.ReadFile(filepath.Join(dir+abi.DefinitionSuffix, "cli"))
		if err != nil {
			continue // not a CLI agent, or its definition's check says why
		}
		f := new(finding)
		found = append(found, f)
		turns <- struct{}{}
		wg.Go(func() {
			defer func() { <-turns }()
			*f = checkCLI(name, dir, strings.TrimSpace(string(b)))
		})
	}
	wg.Wait()
	for _, f := range found {
		d.found = append(d.found, *f)
	}
}

// cliChecksAtOnce bounds the CLIs' --version runs at once.
const cliChecksAtOnce = 4

// checkCLI is the finding of the CLI agent name, whose program is at
// program and whose cli file names cliName.
func checkCLI(name, program, cliName string) finding {
	check := "cli agent " + name
	problem := func(what, fix string) finding { return finding{Check: check, Problem: what, Fix: fix} }
	a, err := cli.Lookup(cliName)
	if err != nil {
		return problem(fmt.Sprintf("its cli file names %q, not one of %s", cliName, strings.Join(cli.Names(), ", ")),
			"write one of them in "+program+abi.DefinitionSuffix+"/cli")
	}
	install := fmt.Sprintf("npm install -g %s@%s, then ctx agent add %s --cli %s --force", npmPackages[a.Name()], a.Version(), name, a.Name())
	if p := executableProblem(program); p != "" {
		return problem(p, install)
	}
	real, p := replaceable(program)
	if p != "" {
		return problem(p, install+", where only root can write")
	}
	got, p := runVersion(real)
	switch {
	case p != "":
		return problem(p, "run "+program+" --version to see why; reinstall it: "+install)
	case olderVersion(got, a.Version()):
		return problem(fmt.Sprintf("%s --version is %s, older than %s, the version ctxfs maps %s's stream for", program, got, a.Version(), a.Name()), "upgrade it: "+install)
	}
	return finding{Check: check, OK: true, Note: fmt.Sprintf("%s %s, mapped for %s", a.Name(), got, a.Version())}
}

// executableProblem says why program (or the file its link names) cannot
// run, "" when it can.
func executableProblem(program string) string {
	if _, err := os.Lstat(program); err != nil {
		return "no program: " + program + " " + errText(err)
	}
	st, err := os.Stat(program)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		target, _ := os.Readlink(program)
		return fmt.Sprintf("its executable %s is missing (%s links to it)", target, program)
	case err != nil:
		return program + ": " + errText(err)
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return program + " is not an executable file"
	}
	return ""
}

// replaceable is the executable program links to, and why it may not be
// run: "" unless someone besides root and the owner of the definitions
// could change it or a directory above it (clienv.OthersCanChange). The
// doctor runs it as its caller, root often, and runs what it checked, not
// the link again.
func replaceable(program string) (string, string) {
	real, err := filepath.EvalSymlinks(program)
	if err != nil {
		return "", program + ": " + errText(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(program), &st); err != nil {
		return "", filepath.Dir(program) + ": " + errText(err)
	}
	if err := clienv.OthersCanChange(real, st.Uid); err != nil {
		return "", abi.Message(err)
	}
	return real, ""
}

// runVersion runs `program --version` as the caller, bounded by
// versionWait, and returns the version it printed, or why there is none.
func runVersion(program string) (version, problem string) {
	home, err := os.MkdirTemp("", "ctx-doctor-home.")
	if err != nil {
		return "", "cannot make a HOME to run it in: " + errText(err)
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(context.Background(), versionWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, program, "--version")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + home}
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := strings.TrimSpace(firstLine(out.String()))
	switch {
	case ctx.Err() != nil:
		return "", fmt.Sprintf("%s --version did not answer within %v", program, versionWait)
	case err != nil:
		return "", fmt.Sprintf("%s --version failed (%v): %s", program, err, text)
	}
	m := versionNumber.FindString(out.String())
	if m == "" {
		return "", fmt.Sprintf("%s --version printed no version number: %q", program, text)
	}
	return m, ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 200 {
		line = line[:200]
	}
	return line
}

// olderVersion reports whether dotted version a is older than b.
func olderVersion(a, b string) bool {
	pa, pb := versionNumber.FindStringSubmatch(a), versionNumber.FindStringSubmatch(b)
	if pa == nil || pb == nil {
		return false
	}
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return false
}
