// Package integration runs the real ctxfs and ctx binaries against real
// mounts, sockets, processes and uids. Nothing here is mocked.
package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

var (
	ctxfsBin string // the server binary, built once for the run
	ctxBin   string // the client binary
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(refServerEnv); spec != "" {
		os.Exit(serveRef(spec)) // a reference server of a benchmark
	}
	// What a killed earlier run left (no t.Cleanup ran); a running
	// binary's namespaces stay.
	for _, ns := range testkit.RemoveDeadNetNS() {
		fmt.Fprintf(os.Stderr, "removed the network namespace %s of a test binary that no longer runs\n", ns)
	}
	removeDeadBinDirs()
	for _, dev := range removeDeadLoops() {
		fmt.Fprintf(os.Stderr, "detached %s, the loop device of a test binary that no longer runs\n", dev)
	}
	dir, err := os.MkdirTemp("", binDirPrefix+fmt.Sprint(os.Getpid())+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755) // tests run the binaries as other uids too
	ctxfsBin, ctxBin = filepath.Join(dir, "ctxfs"), filepath.Join(dir, "ctx")
	// ctx runs ctx-trajectory from beside itself (`ctx agent trajectory`).
	helper := filepath.Join(dir, "ctx-trajectory")
	for bin, pkg := range map[string]string{ctxfsBin: "../cmd/ctxfs", ctxBin: "../cmd/ctx", helper: "../cmd/ctx-trajectory"} {
		out, err := goBuild(bin, pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binDirPrefix begins the name of the directory of a run's binaries in
// $TMPDIR: ctxfs-bin-PID-RANDOM, PID the test binary's.
const binDirPrefix = "ctxfs-bin-"

var binDirOfRun = regexp.MustCompile(`^` + binDirPrefix + `([0-9]+)-[0-9]+$`)

// removeDeadBinDirs removes the binaries' directories (some 45 MB each)
// that test binaries killed earlier left (no t.Cleanup, nor the end of
// TestMain, runs then): those of this uid whose PID no process has. A
// running binary's stay, the other shard's of scripts/test-integration.sh
// too.
func removeDeadBinDirs() {
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		if deadRunsBinDir(e) && os.RemoveAll(filepath.Join(os.TempDir(), e.Name())) == nil {
			fmt.Fprintf(os.Stderr, "removed %s, the binaries of a test binary that no longer runs\n", e.Name())
		}
	}
}

// deadRunsBinDir reports whether e is a binaries' directory of this uid
// whose test binary no longer runs.
func deadRunsBinDir(e os.DirEntry) bool {
	if !testkit.OfEndedRun(binDirOfRun, e.Name()) {
		return false
	}
	info, err := e.Info()
	return err == nil && info.IsDir() && info.Sys().(*syscall.Stat_t).Uid == uint32(os.Geteuid())
}

// goBuild is `go build -o bin pkg` with cgo off, as make build does:
// static binaries, which ctxfs mount requires (a dynamic loader would
// honour LD_PRELOAD in the environment of the helpers it runs as root).
func goBuild(bin, pkg string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// server is one real `ctxfs mount --foreground` process.
type server struct {
	t     testing.TB
	root  string
	store string
	cmd   *exec.Cmd
	log   *os.File
	env   []string // added to the server's environment (CTXFS_LIMITS=…)
	wrap  []string // a command the server runs under (prlimit …)
	args  []string // added to its command line (--log-file …)
	// crashed are the processes crash killed, each with the channel its
	// reaper closes: kill waits on it rather than read ProcessState,
	// which the reaper's Wait writes.
	crashed sync.Map // *exec.Cmd → <-chan struct{}
}

// newServer prepares a root (with a debug/echo agent "coder") and a store
// in fresh temporary directories, and starts the server.
func newServer(t testing.TB) *server { return newServerWith(t, nil) }

// newServerWith is newServer with configure run on the server before it
// starts (its environment, a wrapper command, definitions).
func newServerWith(t testing.TB, configure func(*server)) *server {
	t.Helper()
	base := t.TempDir()
	// Other uids must reach the mount and the sockets: t.TempDir makes
	// both its directory and the one above it 0700.
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	s := &server{t: t, root: filepath.Join(base, "ctx"), store: testStore(t, base)}
	s.define("coder", map[string]string{"model": "debug/echo"})
	if configure != nil {
		configure(s)
	}
	s.start()
	return s
}

// storeDirEnv names a directory the tests' stores go in instead of their
// temporary directories: TestStoreSuiteOnMooseFS runs the store's tests
// again with it on a MooseFS volume.
const storeDirEnv = "CTXFS_TEST_STORE_DIR"

// testStore is where a test's server keeps its store: base/store, or a
// fresh directory in $CTXFS_TEST_STORE_DIR, removed when the test ends.
func testStore(t testing.TB, base string) string {
	dir := os.Getenv(storeDirEnv)
	if dir == "" {
		return filepath.Join(base, "store")
	}
	d, err := os.MkdirTemp(dir, "store-")
	testkit.Must(t, err)
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "store")
}

// besideStore is a temporary directory on the filesystem of store (a
// t.TempDir unless the stores are elsewhere: CTXFS_TEST_STORE_DIR).
func besideStore(t testing.TB, store string) string {
	if os.Getenv(storeDirEnv) == "" {
		return t.TempDir()
	}
	d, err := os.MkdirTemp(filepath.Dir(store), "beside-")
	testkit.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// define writes an agent definition; "program" is the executable.
func (s *server) define(name string, files map[string]string) {
	d := filepath.Join(s.root, "agent", name+".d")
	testkit.Must(s.t, os.MkdirAll(d, 0o755))
	for f, v := range files {
		p := filepath.Join(d, f)
		mode := os.FileMode(0o644)
		if f == "program" {
			p, mode = filepath.Join(s.root, "agent", name), 0o755
		}
		testkit.Must(s.t, os.WriteFile(p, []byte(v), mode))
	}
}

func (s *server) start() {
	s.t.Helper()
	s.launch()
	s.waitReady()
}

// launch starts the server process (its log beside the root; killed at
// the test's end) and returns at once.
func (s *server) launch() {
	s.t.Helper()
	logPath := filepath.Join(filepath.Dir(s.root), fmt.Sprintf("server-%d.log", time.Now().UnixNano()))
	log, err := os.Create(logPath)
	testkit.Must(s.t, err)
	s.log = log
	args := append(append([]string{}, s.wrap...), ctxfsBin, "mount", "--foreground", "--root", s.root, "--store", s.store)
	args = append(args, s.args...)
	s.cmd = exec.Command(args[0], args[1:]...)
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// Killed with the test binary too: ci65 left a server serving its mount.
	s.cmd.SysProcAttr = testkit.ChildAttr()
	testkit.Must(s.t, s.cmd.Start())
	cmd := s.cmd
	s.t.Cleanup(func() { s.kill(cmd, syscall.SIGTERM) })
}

// waitReady waits until the coder socket answers ping and every agent and
// model defined before the start has its socket: the server makes them
// one by one, and a test may send to any of them first.
func (s *server) waitReady() {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if frames, err := s.request("coder", `{"op":"ping"}`); err == nil && len(frames) == 1 && frames[0]["type"] == "pong" && s.agentSocketsUp() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("server did not answer; log:\n%s\nmounts at and below %s then:\n%s", s.logText(), s.root, mountsBelow(s.root))
}

// mountsBelow is the lines of this namespace's mount table for dir and
// what is below it: what a server that would not start found there.
func mountsBelow(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// agentSocketsUp reports whether every agent/NAME.d has its NAME.sock,
// every model/P/M.d its M.sock, and the built-in model debug/echo (which
// has no .d) its socket, each accepting connections: a server that
// stopped leaves its sockets, refusing them, until the next one replaces
// them.
func (s *server) agentSocketsUp() bool {
	defs, _ := filepath.Glob(filepath.Join(s.root, "agent", "*.d"))
	models, _ := filepath.Glob(filepath.Join(s.root, "model", "*", "*.d"))
	builtin := filepath.Join(s.root, "model", "debug", "echo.d")
	for _, d := range append(append(defs, models...), builtin) {
		c, err := net.Dial("unix", strings.TrimSuffix(d, ".d")+".sock")
		if err != nil {
			return false
		}
		c.Close()
	}
	return true
}

// stopProcess signals a started process with sig and waits for it;
// SIGKILL after 10 s.
func stopProcess(cmd *exec.Cmd, sig syscall.Signal) (killed bool) {
	cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return false
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		return true
	}
}

func (s *server) logText() string {
	b, _ := os.ReadFile(s.log.Name())
	return string(b)
}

// waitLogText waits until the server's log holds text: the server writes
// its log behind its work (logx.Queue gathers lines for a few
// milliseconds), so a line is there soon after what it reports, not at once.
func (s *server) waitLogText(text string) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.logText(), text) {
		if time.Now().After(deadline) {
			s.t.Fatalf("after 10 s the server's log does not hold %q:\n%s", text, lastLines(s.logText(), 20))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill stops a server process with sig and waits for it; SIGKILL after 10 s.
func (s *server) kill(cmd *exec.Cmd, sig syscall.Signal) {
	if done, ok := s.crashed.Load(cmd); ok {
		// crash killed it and its reaper waits; the mounts may be the
		// next server's by now.
		select {
		case <-done.(<-chan struct{}):
		case <-time.After(10 * time.Second):
		}
		return
	}
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	if stopProcess(cmd, sig) {
		// Said, since what the test finds next (a journal file left, a
		// dead mount) is the kill's, not the signal's.
		s.t.Logf("the server (pid %d) was still there 10 s after %v: killed (SIGKILL); its log's end:\n%s", cmd.Process.Pid, sig, lastLines(s.logText(), 10))
	}
	for _, d := range []string{"home", "shared"} { // never leave a mount behind
		exec.Command("umount", "-l", filepath.Join(s.root, d)).Run()
	}
}

// restart kills the server with sig and starts a new one on the same store.
func (s *server) restart(sig syscall.Signal) {
	s.kill(s.cmd, sig)
	s.start()
}

type frame = map[string]any

// request sends one request line to an agent's socket and reads every
// reply frame until EOF.
func (s *server) request(agent, line string) ([]frame, error) {
	return s.requestWithin(agent, line, 30*time.Second)
}

// requestWithin is request with its own deadline (a real CLI's run can
// take longer than a fake program's).
func (s *server) requestWithin(agent, line string, limit time.Duration) ([]frame, error) {
	conn, err := net.Dial("unix", filepath.Join(s.root, "agent", agent+".sock"))
	if err != nil {
		return nil, err
	}
	return requestOn(conn, line, limit)
}

// requestOn sends one request line on a connected socket, reads every
// reply frame until EOF within limit, and closes it.
func requestOn(conn net.Conn, line string, limit time.Duration) ([]frame, error) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(limit))
	if _, err := conn.Write([]byte(line + "\n")); err != nil {
		return nil, err
	}
	var frames []frame
	sc := bufio.NewScanner(conn)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var f frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return frames, fmt.Errorf("bad frame %q: %v", sc.Text(), err)
		}
		frames = append(frames, f)
	}
	return frames, sc.Err()
}

// mustRequest is request that fails the test on transport errors.
func (s *server) mustRequest(agent, line string) []frame {
	s.t.Helper()
	frames, err := s.request(agent, line)
	if err != nil {
		s.t.Fatalf("%s: %v\nserver log:\n%s", line, err, s.logText())
	}
	return frames
}

// fsck runs `ctxfs fsck` on the store and returns its output and exit code.
func (s *server) fsck(args ...string) (string, int) {
	out, err := exec.Command(ctxfsBin, append([]string{"fsck", "--store", s.store}, args...)...).CombinedOutput()
	// The line that names a store's portable ways (a server run with
	// CTXFS_STORE_PORTABLE) is not a finding: the store tests compare
	// findings, in every way the store can take.
	out = regexp.MustCompile(`(?m)^ctxfs: fsck: store ways: .*\n`).ReplaceAll(out, nil)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	return string(out), code
}

func (s *server) sessionDir(uid int, agent, name string) string {
	return filepath.Join(s.store, "home", fmt.Sprint(uid), "agent", agent, "session", name)
}

// fileBytes reads a file, failing the test on error.
func fileBytes(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	testkit.Must(t, err)
	return string(b)
}

// sendersUntil starts n clients that send to the coder socket, one send
// after another, until stop closes. wait waits for them (failing the test
// after limit) and returns each run whose start frame a client received,
// with its session: what the server acknowledged.
func (s *server) sendersUntil(n int, stop <-chan struct{}, session func(c int) string) (wait func(limit time.Duration) map[string]string) {
	var mu sync.Mutex
	started := map[string]string{}
	var wg sync.WaitGroup
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				line := fmt.Sprintf(`{"op":"send","id":"c%d-%d","session":%q,"input":"message %d of client %d"}`, c, i, session(c), i, c)
				frames, _ := s.request("coder", line)
				for _, f := range frames {
					if f["type"] == "start" {
						mu.Lock()
						started[f["run"].(string)] = session(c)
						mu.Unlock()
					}
				}
			}
		}()
	}
	return func(limit time.Duration) map[string]string {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(limit):
			s.t.Fatalf("senders still running %v after stop", limit)
		}
		mu.Lock()
		defer mu.Unlock()
		return started
	}
}

// recordedStarts counts the start events of each run in an events.jsonl,
// failing the test on a line that is not JSON (a torn line).
func recordedStarts(t testing.TB, eventsPath string) map[string]int {
	t.Helper()
	starts := map[string]int{}
	b := fileBytes(t, eventsPath)
	if len(b) > 0 && !strings.HasSuffix(b, "\n") {
		t.Fatalf("%s ends in a torn line", eventsPath)
	}
	for _, l := range strings.Split(strings.TrimSuffix(b, "\n"), "\n") {
		var e frame
		if l == "" {
			continue
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%s: torn line %q", eventsPath, l)
		}
		if e["type"] == "start" {
			starts[fmt.Sprint(e["run"])]++
		}
	}
	return starts
}
