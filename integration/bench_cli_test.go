package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// benchCLIKey is the key the CLIs get in these benchmarks; aimock takes
// any.
const benchCLIKey = "sk-ctxfs-bench-key"

// aimockURL matches the line where aimock says where it listens.
var aimockURL = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// startAimock runs @copilotkit/aimock (agent/provider's install) on a
// free port, serving agent/cli's fixtures, until tb ends; it returns the
// server's URL.
func startAimock(tb testing.TB) string {
	tb.Helper()
	fixtures, err := filepath.Abs(filepath.Join("..", "agent", "cli", "testdata", "fixtures", "fixtures.json"))
	testkit.Must(tb, err)
	return startAimockWith(tb, fixtures)
}

// startAimockWith is startAimock serving the fixtures file given.
func startAimockWith(tb testing.TB, fixtures string) string {
	tb.Helper()
	llmock, err := filepath.Abs(filepath.Join("..", "agent", "provider", "testdata", "aimock", "node_modules", ".bin", "llmock"))
	testkit.Must(tb, err)
	if _, err := os.Stat(llmock); err != nil {
		tb.Skipf("aimock is not installed (scripts/deps.sh): %v", err)
	}
	cmd := exec.Command("node", llmock, "-p", "0", "-h", "127.0.0.1", "-f", fixtures)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	pipe, err := cmd.StdoutPipe()
	testkit.Must(tb, err)
	cmd.Stderr = cmd.Stdout
	testkit.Must(tb, cmd.Start())
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(pipe)
		for lines.Scan() {
			if m := aimockURL.FindStringSubmatch(lines.Text()); m != nil {
				urls <- m[1]
				break
			}
		}
		io.Copy(io.Discard, pipe)
	}()
	select {
	case url := <-urls:
		return url
	case <-time.After(30 * time.Second):
		tb.Fatal("aimock did not say where it listens")
		return ""
	}
}

// BenchmarkCLIOverheadClaudeCode and BenchmarkCLIOverheadCodex: the wall
// time of `ctx agent send` to a cli agent (SPEC 16) against the same CLI
// run directly with the same invocation (its adapter's), on the same
// aimock fixture, side by side in one run: ms/direct, ms/send, the ratio
// and the milliseconds ctxfs adds (the durable start, the ctx process and
// its socket, the run's uid and environment, the recording of the frames,
// and the CLI's own files in a HOME on the mount); and the CLI run
// directly with its HOME on the mount, to tell that last part apart.
func BenchmarkCLIOverheadClaudeCode(b *testing.B) { benchCLIOverhead(b, cli.ClaudeCode, "", "") }

func BenchmarkCLIOverheadCodex(b *testing.B) {
	benchCLIOverhead(b, cli.Codex, "gpt-5.1-codex", "/v1")
}

func benchCLIOverhead(b *testing.B, name, model, urlSuffix string) {
	requireFUSE(b)
	bins := cliBinDir(b)
	endpoint := startAimock(b) + urlSuffix
	a, err := cli.Lookup(name)
	testkit.Must(b, err)
	exe, err := filepath.EvalSymlinks(filepath.Join(bins, a.Program()))
	testkit.Must(b, err)
	s := newServerWith(b, func(s *server) {
		s.env = append(s.env, "CTXFS_BENCH_CLI_KEY="+benchCLIKey)
		files := map[string]string{"cli": name + "\n", "endpoint": endpoint + "\n", "api_key_env": "CTXFS_BENCH_CLI_KEY\n"}
		if model != "" {
			files["model_id"] = model + "\n"
		}
		s.define("bench", files)
		testkit.Must(b, os.Symlink(exe, filepath.Join(s.root, "agent", "bench")))
	})
	o := cli.Options{BaseURL: endpoint, Model: model}
	direct := directCLI(b, a, exe, o, b.TempDir())
	// The same, with HOME in the agent's tree through the mount, where a
	// run's HOME is: what the CLI's own files cost there.
	mountHome := s.mnt("home/0/agent/bench/root/home/direct")
	testkit.Must(b, os.MkdirAll(mountHome, 0o700))
	directMount := directCLI(b, a, exe, o, mountHome)
	n := max(b.N, 5)
	// One of each first: the CLIs' first run in a fresh HOME sets it up.
	direct(0)
	directMount(0)
	sendCLI(b, s, "warm-up")
	// Interleaved, one of each per round: the machine is shared, and its
	// load then weighs on the three alike.
	var directTime, mountTime, sendTime time.Duration
	for i := 0; i < n; i++ {
		directTime += perRun(1, direct)
		mountTime += perRun(1, directMount)
		sendTime += perRun(1, func(int) { sendCLI(b, s, fmt.Sprintf("b%d", i)) })
	}
	directTime, mountTime, sendTime = directTime/time.Duration(n), mountTime/time.Duration(n), sendTime/time.Duration(n)
	b.ReportMetric(ms(directTime), "ms/direct")
	b.ReportMetric(ms(mountTime), "ms/direct-home-on-mount")
	b.ReportMetric(ms(sendTime), "ms/send")
	b.ReportMetric(float64(sendTime)/float64(directTime), "send/direct")
	b.ReportMetric(ms(sendTime-directTime), "ms-added")
	b.ReportMetric(ms(sendTime-mountTime), "ms-added-beyond-home")
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// directCLI returns a function that runs the CLI once as the server
// would (its adapter's args, env and files, the key in its variable, the
// prompt on stdin) in home, kept across runs as the agent's is.
func directCLI(b *testing.B, a cli.Adapter, exe string, o cli.Options, home string) func(int) {
	inv, err := a.Invocation(o)
	testkit.Must(b, err)
	work := b.TempDir()
	for _, f := range inv.Files {
		p := filepath.Join(home, f.Path)
		testkit.Must(b, os.MkdirAll(filepath.Dir(p), 0o700))
		testkit.Must(b, os.WriteFile(p, f.Data, 0o600))
	}
	env := append([]string{"PATH=" + filepath.Dir(exe) + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + b.TempDir(),
		inv.KeyVar + "=" + benchCLIKey}, inv.Env...)
	return func(int) {
		cmd := exec.Command(exe, inv.Args...)
		cmd.Dir, cmd.Env, cmd.Stdin = work, env, strings.NewReader("ctxfs-hello")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Hello from aimock.") {
			b.Fatalf("%s run directly: %v\n%s", a.Name(), err, out)
		}
	}
}

// sendCLI runs `ctx agent send bench --session SESSION ctxfs-hello` and
// fails unless it printed the fixture's answer: the server runs the
// definition's cli (SPEC 16).
func sendCLI(b *testing.B, s *server, session string) {
	cmd := exec.Command(ctxBin, "agent", "send", "bench", "--session", session, "ctxfs-hello")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "CTX_ROOT=" + s.root, "HOME=/"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Hello from aimock.") {
		b.Fatalf("ctx agent send to the cli agent: %v\n%s\n(a server without SPEC 16's cli runs starts agent/bench as a plain program)\nlog:\n%s", err, out, s.logText())
	}
}
