package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// readmeSkips are the README's "Using it" lines that cannot run here, by
// the start of the line, each with why: the README says what each needs.
// A skip that matches no line fails the test (the list must not outlive
// the README).
var readmeSkips = map[string]string{
	// "interactive": it waits for a person at a terminal (TestChat* drive
	// it on a pseudo-terminal).
	"ctx agent chat ": "interactive",
	// "while a run goes on": debug/echo's runs end at once, so there is
	// none to follow (TestAttach* cover attach) or to stop (cancel's
	// tests).
	"ctx agent attach ": "needs a run in progress",
	"ctx agent cancel ": "needs a run in progress",
}

// The README's "Using it" lines work when pasted in order into a root
// shell: each runs, in one bash as a pasted line would (a cd or an exec
// in one line holds for the next), against a real server, and exits 0.
// The lines are read from README.md itself, so a README edit that breaks
// one fails here. /ctx and /var/lib/ctxfs become a fresh root and store,
// which CTX_ROOT and CTXFS_STORE also name (as the README says, for both
// binaries); the mount(8) line gets the helper make install would put in
// /sbin. At the end (the last line is a ctxfs umount) nothing is mounted.
func TestReadmeUsingIt(t *testing.T) {
	requireFUSE(t)
	lines := readmeUsingIt(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	root, store := filepath.Join(base, "ctx"), filepath.Join(base, "store")
	t.Cleanup(func() { stopRoot(t, root) })
	bin := filepath.Join(base, "bin")
	testkit.Must(t, os.Mkdir(bin, 0o755))
	testkit.Must(t, os.Symlink(ctxfsBin, filepath.Join(bin, "ctxfs")))
	testkit.Must(t, os.Symlink(ctxBin, filepath.Join(bin, "ctx")))
	skips := readmeSkips
	if why := provideMountHelper(t); why != "" {
		skips = map[string]string{"mount -t fuse.ctxfs ": why}
		for k, v := range readmeSkips {
			skips[k] = v
		}
	}

	script, ran := readmeScript(t, lines, skips, root, store)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/bash", "--norc", "--noprofile", "-c", script)
	cmd.Env = []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + base, "LC_ALL=C",
		"CTX_ROOT=" + root, "CTXFS_STORE=" + store}
	cmd.Dir = "/"
	cmd.WaitDelay = 5 * time.Second
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the README's lines did not end within 2 minutes; output:\n%s", out)
	}
	outputs, statuses := splitByLine(string(out))
	for _, i := range ran {
		status, ok := statuses[i]
		switch {
		case !ok:
			t.Errorf("README line %q: never finished (the shell ended before it); output:\n%s", lines[i], out)
		case status != 0:
			t.Errorf("README line %q: exit %d, want 0; its output:\n%s", lines[i], status, outputs[i])
		}
	}
	if left := mountsUnder(root); len(left) > 0 {
		t.Errorf("mounts left after the README's last ctxfs umount: %v", left)
	}
}

// readmeUsingIt returns the lines of the shell blocks of README.md's
// "Using it" section (up to the next heading), comments and blank lines
// left out; a line ending in \ goes on on the next.
func readmeUsingIt(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../README.md")
	testkit.Must(t, err)
	defer f.Close()
	var lines []string
	in, block, cont := false, false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "## Using it":
			in = true
		case in && !block && strings.HasPrefix(l, "#"):
			in = false // the next heading
		case in && strings.HasPrefix(l, "```"):
			block = !block && (l == "```sh" || l == "```bash")
		case in && block:
			l = cont + l
			if strings.HasSuffix(l, "\\") {
				cont = strings.TrimSuffix(l, "\\") + "\n"
				continue
			}
			cont = ""
			if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "#") {
				lines = append(lines, l)
			}
		}
	}
	testkit.Must(t, sc.Err())
	if len(lines) == 0 {
		t.Fatal(`README.md has no shell block under "## Using it"`)
	}
	return lines
}

// defaultRoot is the README's root, /ctx (and not /ctxfs).
var defaultRoot = regexp.MustCompile(`/ctx\b`)

// readmeScript is the bash script that runs lines in order, each but the
// skipped ones followed by a marker with its index and exit status (see
// splitByLine); ran lists the indexes it runs. /ctx and /var/lib/ctxfs
// become root and store.
func readmeScript(t *testing.T, lines []string, skips map[string]string, root, store string) (script string, ran []int) {
	t.Helper()
	used := map[string]bool{}
	var b strings.Builder
	for i, l := range lines {
		if prefix, why, ok := skippedLine(l, skips); ok {
			used[prefix] = true
			t.Logf("skipped (%s): %s", why, l)
			continue
		}
		l = strings.ReplaceAll(l, "/var/lib/ctxfs", store)
		l = defaultRoot.ReplaceAllLiteralString(l, root)
		fmt.Fprintf(&b, "%s\necho \"%s %d $?\"\n", l, lineMark, i)
		ran = append(ran, i)
	}
	for prefix := range readmeSkips {
		if !used[prefix] {
			t.Errorf("skip list: no README line starts with %q: remove it from readmeSkips", prefix)
		}
	}
	return b.String(), ran
}

// skippedLine reports whether l is on the skip list, and why.
func skippedLine(l string, skips map[string]string) (prefix, why string, ok bool) {
	for p, why := range skips {
		if strings.HasPrefix(l, p) {
			return p, why, true
		}
	}
	return "", "", false
}

// lineMark starts the line the script prints after each README line.
const lineMark = "@@readme-line"

// splitByLine cuts the script's output at its marks: the output of each
// README line by index, and its exit status.
func splitByLine(out string) (outputs map[int]string, statuses map[int]int) {
	outputs, statuses = map[int]string{}, map[int]int{}
	var cur strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == lineMark {
			i, err1 := strconv.Atoi(f[1])
			status, err2 := strconv.Atoi(f[2])
			if err1 == nil && err2 == nil {
				outputs[i], statuses[i] = cur.String(), status
				cur.Reset()
				continue
			}
		}
		cur.WriteString(l)
	}
	return outputs, statuses
}

// provideMountHelper puts the ctxfs under test at helperPath for the
// README's mount(8) line, as make install does, and removes it at the
// end; it returns why the line cannot run when it cannot ("" when it
// can): an installed helper is another build, left alone.
func provideMountHelper(t *testing.T) (whyNot string) {
	t.Helper()
	if _, err := exec.LookPath("mount"); err != nil {
		return "no mount(8)"
	}
	if _, err := os.Lstat(helperPath); err == nil {
		return helperPath + " is installed already (another build); not replacing it"
	}
	testkit.Must(t, os.Symlink(ctxfsBin, helperPath))
	t.Cleanup(func() { os.Remove(helperPath) })
	return ""
}
