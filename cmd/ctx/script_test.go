package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/ctxfs/ctxfs/internal/cli/trajexport"
	"github.com/ctxfs/ctxfs/internal/scriptcmd"
)

// TestMain lets scripts run this package's main as the command "ctx".
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"ctx": main,
		// what `ctx agent trajectory` runs, found on $PATH here
		"ctx-trajectory": func() { os.Exit(trajexport.Main(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs testdata/script/*.txtar against the real server. They
// need the ctxfs binary and FUSE; without them the test is skipped, unless
// CTXFS_REQUIRE_FUSE is set (CI sets it, so a missing server fails there).
//
// Script environment: CTX_ROOT=$WORK/root (put agent definitions in the
// archive under root/agent/), CTXFS_STORE=$WORK/store, CTXHOME = the
// caller's home in the mount. Commands:
//
//	ctxfs ARGS...          the server binary (e.g. ctxfs fsck --store $CTXFS_STORE)
//	ctxfs-up               mount in the foreground and wait until it answers;
//	                       it is stopped and unmounted when the script ends
//	stop-server            stop and unmount it now
//	exits N CMD ARGS...    run CMD, require exit status N; keeps stdout/stderr
func TestScripts(t *testing.T) {
	bin, err := serverBinary(t)
	if err == nil {
		_, err = os.Stat("/dev/fuse")
	}
	if err == nil {
		err = probeServer(bin)
	}
	if err != nil {
		if os.Getenv("CTXFS_REQUIRE_FUSE") != "" {
			t.Fatalf("CTXFS_REQUIRE_FUSE is set but the server cannot run: %v", err)
		}
		t.Skipf("no server (set CTXFS_REQUIRE_FUSE to make this fail): %v", err)
	}
	testscript.Run(t, testscript.Params{
		Dir:   "testdata/script",
		Setup: setupScript(bin),
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"ctxfs":       cmdCtxfs,
			"ctxfs-up":    cmdCtxfsUp,
			"stop-server": cmdStopServer,
			"exits":       scriptcmd.Exits,
		},
	})
}

// TestCLIScripts runs testdata/cli/*.txtar: what ctx does without a
// server (help, version, completion, usage errors, an absent mount). The
// environment is TestScripts' without the server commands.
func TestCLIScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:   "testdata/cli",
		Setup: setupScript(""),
		Cmds:  map[string]func(*testscript.TestScript, bool, []string){"exits": scriptcmd.Exits},
	})
}

// serverBinary is $CTXFS_BIN, else ./cmd/ctxfs built into a temp dir.
func serverBinary(t *testing.T) (string, error) {
	if bin := os.Getenv("CTXFS_BIN"); bin != "" {
		return bin, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "ctxfs")
	build := exec.Command(goTool, "build", "-o", bin, "github.com/ctxfs/ctxfs/cmd/ctxfs")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as ctxfs mount requires
	out, err := build.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build ctxfs: %v\n%s", err, out)
	}
	return bin, nil
}

func setupScript(bin string) func(*testscript.Env) error {
	return func(e *testscript.Env) error {
		root := filepath.Join(e.WorkDir, "root")
		uid := strconv.Itoa(os.Getuid())
		e.Setenv("CTX_ROOT", root)
		e.Setenv("CTXFS_STORE", filepath.Join(e.WorkDir, "store"))
		e.Setenv("CTXHOME", filepath.Join(root, "home", uid))
		if bin != "" {
			e.Setenv("CTXFS_BIN", bin)
			e.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+e.Getenv("PATH"))
		}
		for _, d := range []string{"agent", "model"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				return err
			}
		}
		return nil
	}
}

func cmdCtxfs(ts *testscript.TestScript, neg bool, args []string) {
	err := ts.Exec(ts.Getenv("CTXFS_BIN"), args...)
	if err != nil && !neg {
		ts.Fatalf("ctxfs: %v", err)
	}
	if err == nil && neg {
		ts.Fatalf("ctxfs succeeded unexpectedly")
	}
}

// cmdCtxfsUp starts `ctxfs mount --foreground` and waits until both mounts
// and the sockets of the defined agents answer. The server is stopped and
// unmounted when the script ends, whether it passed or not, so that no
// mount is left behind to hang later tests.
func cmdCtxfsUp(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! ctxfs-up")
	}
	root, bin := ts.Getenv("CTX_ROOT"), ts.Getenv("CTXFS_BIN")
	logf, err := os.Create(ts.MkAbs("ctxfs.log"))
	ts.Check(err)
	cmd := exec.Command(bin, append([]string{"mount", "--foreground", "--root", root, "--store", ts.Getenv("CTXFS_STORE")}, args...)...)
	cmd.Env = append(os.Environ(), "CTX_ROOT="+root, "CTXFS_STORE="+ts.Getenv("CTXFS_STORE"))
	cmd.Stdout, cmd.Stderr = logf, logf
	srv, err := startServer(cmd, bin, root)
	ts.Check(err)
	servers.Store(ts, srv)
	ts.Defer(func() { srv.stop(); logf.Close(); servers.Delete(ts) })
	if err := srv.waitReady(); err != nil {
		log, _ := os.ReadFile(ts.MkAbs("ctxfs.log"))
		ts.Fatalf("ctxfs-up: %v\n%s", err, log)
	}
}

// servers holds each script's server, for stop-server.
var servers sync.Map // *testscript.TestScript -> *server

// cmdStopServer stops the script's server as a crash or an admin would
// leave it stopped: its mounts gone, its sockets as it left them.
func cmdStopServer(ts *testscript.TestScript, neg bool, args []string) {
	srv, ok := servers.Load(ts)
	if neg || len(args) != 0 || !ok {
		ts.Fatalf("usage: stop-server, after ctxfs-up")
	}
	srv.(*server).stop()
}

// waitReady polls until the server's sockets and both mounts answer. A
// server whose sockets are up but whose mounts are not, some seconds later,
// has no working FUSE: that is reported as such, not as a slow start.
func (s *server) waitReady() error {
	root := s.root
	deadline := time.Now().Add(20 * time.Second)
	var socketsSince time.Time
	for {
		select {
		case <-s.done:
			return fmt.Errorf("server exited: %v", s.err)
		default:
		}
		switch {
		case socketsUp(root) && mountsUp(root):
			return nil
		case socketsUp(root) && socketsSince.IsZero():
			socketsSince = time.Now()
		case !socketsSince.IsZero() && time.Since(socketsSince) > 5*time.Second:
			return errors.New("the sockets answer but home/ and shared/ are not mounted (no FUSE)")
		case time.Now().After(deadline):
			return errors.New("server not ready after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountsUp reports whether home/ and shared/ are mount points: their
// device differs from root's.
func mountsUp(root string) bool {
	var rs syscall.Stat_t
	if syscall.Stat(root, &rs) != nil {
		return false
	}
	for _, m := range []string{"home", "shared"} {
		var s syscall.Stat_t
		if syscall.Stat(filepath.Join(root, m), &s) != nil || s.Dev == rs.Dev {
			return false
		}
	}
	return true
}

// socketsUp reports whether every root/agent/NAME.d has its NAME.sock.
func socketsUp(root string) bool {
	defs, _ := filepath.Glob(filepath.Join(root, "agent", "*.d"))
	for _, d := range defs {
		if _, err := os.Stat(strings.TrimSuffix(d, ".d") + ".sock"); err != nil {
			return false
		}
	}
	return true
}

// probeServer mounts once in a scratch directory to learn whether the
// server can serve scripts at all (it builds before it mounts: FUSE may not
// be wired yet, or the host may not allow it).
func probeServer(bin string) error {
	dir, err := os.MkdirTemp("", "ctxprobe") // short: socket paths are limited
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "root")
	os.MkdirAll(filepath.Join(root, "agent", "probe.d"), 0o755)
	os.WriteFile(filepath.Join(root, "agent", "probe.d", "model"), []byte("debug/echo\n"), 0o644)
	cmd := exec.Command(bin, "mount", "--foreground", "--root", root, "--store", filepath.Join(dir, "store"))
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	srv, err := startServer(cmd, bin, root)
	if err != nil {
		return err
	}
	err = srv.waitReady()
	srv.stop()
	if err != nil {
		return fmt.Errorf("probe mount: %v\n%s", err, log.String())
	}
	return nil
}

// server is a running `ctxfs mount --foreground`.
type server struct {
	cmd       *exec.Cmd
	bin, root string
	done      chan struct{} // closed when the process has exited
	err       error         // its exit error, once done
}

func startServer(cmd *exec.Cmd, bin, root string) (*server, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, bin: bin, root: root, done: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	return s, nil
}

// stop asks the server to stop (SIGTERM), then unmounts with `ctxfs
// umount` and kills it if it does not go in time.
func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		exec.Command(s.bin, "umount", "--root", s.root).Run()
		s.cmd.Process.Kill()
		<-s.done
	}
	exec.Command(s.bin, "umount", "--root", s.root).Run() // a no-op after a clean exit
}
