package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/agent"
	"github.com/ctxfs/ctxfs/agent/trampoline"
	"github.com/ctxfs/ctxfs/internal/logx"
	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/internal/sdnotify"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/server"
	"github.com/ctxfs/ctxfs/session"
)

// readyFD is the descriptor on which a foreground server started by a
// background `ctxfs mount` reports that it serves.
const readyFD = 3

// logName is the server's log in the store when it runs in the
// background: its stdout and stderr, and its log lines unless --log-file
// names another file.
const logName = "ctxfs.log"

// mountConfig is what `ctxfs mount` (and the mount helper) was asked.
type mountConfig struct {
	root, store string
	foreground  bool
	gcIdle      time.Duration
	log         logx.Options
	options     []string // -o lists, applied by resolve
	quiet       bool     // no "serving" line (the mount helper, as mount(8) helpers are)
	follow      bool     // serve a store another server writes, read-only (follow.go)
	cluster     clusterConfig
}

// addFlags declares the mount flags on f: the command's, or the mount
// helper's (where -o options set them).
func (c *mountConfig) addFlags(f *pflag.FlagSet) {
	f.StringVar(&c.root, "root", "", rootFlagHelp)
	f.StringVar(&c.store, "store", "", storeFlagHelp)
	f.BoolVar(&c.foreground, "foreground", false, "stay attached: log on stderr, stop on SIGINT or SIGTERM, tell systemd when ready ($NOTIFY_SOCKET)")
	f.DurationVar(&c.gcIdle, "gc-idle", 0, "every `DURATION`, archive the temp-* sessions idle for as long as that (a minute or more, e.g. 30m; default off)")
	f.StringVar(&c.log.Level, "log-level", "info", "log lines of this `LEVEL` and above: "+strings.Join(logx.Levels, ", "))
	f.StringVar(&c.log.File, "log-file", "", "append the log to this `FILE` (default: stderr with --foreground, else STORE/"+logName+")")
	f.StringVar(&c.log.Format, "log-format", "text", "log line `FORMAT`: text, or json (one object a line, for journald and collectors)")
	f.BoolVar(&c.follow, "follow", false, followFlagHelp)
	c.cluster.addFlags(f)
	f.StringArrayVarP(&c.options, "options", "o", nil, "mount `OPTIONS`, comma-separated, as in fstab: gc-idle=D, log-level=L, log-file=F, log-format=T; rw, defaults, allow_other, … are accepted and change nothing (see below)")
}

func newMountCommand() *cobra.Command {
	c := &mountConfig{}
	cmd := &cobra.Command{
		Use:   "mount",
		Short: "Serve a store: mount ROOT/home and ROOT/shared, listen on the sockets, run agents",
		Long: `Mount serves the store at the root: ROOT/home and ROOT/shared become two FUSE
mounts of one process, and every agent and model defined under ROOT/agent
and ROOT/model gets its socket there. Without --foreground the server starts
in the background and mount returns once both mounts answer; its output goes
to STORE/` + logName + `. With --foreground it stays attached, logs on stderr,
and, under systemd (Type=notify), sends READY=1 once both mounts answer and
STOPPING=1 when it stops.

As root the mounts are made directly, with allow_other: every user sees
their own home. Another user mounts through fusermount3 (package fuse3)
and needs read and write access to /dev/fuse; the server then serves that
user alone.

-o takes the options of an fstab line: gc-idle=D, log-level=L, log-file=F
and log-format=T set what the flags of the same names set; rw, defaults,
auto, noauto, nofail, _netdev, user, users, nouser, owner, group, nosuid,
nodev, allow_other, default_permissions, comment=… and x-… are accepted and
change nothing (they hold already, or concern mount(8)); ro is refused
(ctxfs has no read-only mode), and so is any other option.

--follow serves a store that another server writes (a cluster's writer
host, over a shared filesystem), read-only: the whole tree, every change
refused with EROFS, logs verified at open against their seals and the
writer's journal, the writer's changes seen within a second. It takes no
store lock, serves no socket and writes nothing in the store, its log
included (give --log-file, or --foreground).

Called as mount.fuse.ctxfs (the symlink make install puts in /sbin), ctxfs
is the mount(8) helper that makes an fstab line work:
  /var/lib/ctxfs  /ctx  fuse.ctxfs  defaults,gc-idle=30m  0 0`,
		Example: `  ctxfs mount
  ctxfs mount --root /srv/ctx --store /srv/ctxfs-store
  ctxfs mount --foreground --log-level debug
  ctxfs mount --foreground --log-format json      # under systemd, for journald
  ctxfs mount -o gc-idle=30m,log-file=/var/log/ctxfs.log`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.resolve(cmd.Flags(), false); err != nil {
				return err
			}
			return c.start()
		},
	}
	c.addFlags(cmd.Flags())
	cmd.MarkFlagDirname("root")
	cmd.MarkFlagDirname("store")
	cmd.MarkFlagFilename("log-file")
	cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(logx.Levels, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions(logx.Formats, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("options", cobra.FixedCompletions([]string{"gc-idle=", "log-level=", "log-file=", "log-format="}, cobra.ShellCompDirectiveNoSpace))
	return cmd
}

// resolve applies the -o options to the flags f, fills in the defaults,
// makes paths absolute and checks the values; a bad one is a usage error.
// sloppy ignores unknown options (mount -s).
func (c *mountConfig) resolve(f *pflag.FlagSet, sloppy bool) error {
	if err := applyOptions(c.options, f, sloppy); err != nil {
		return err
	}
	var err error
	if c.root, err = absOr(c.root, defaultRoot()); err != nil {
		return err
	}
	if c.store, err = absOr(c.store, defaultStore()); err != nil {
		return err
	}
	if f.Changed("gc-idle") && c.gcIdle < time.Minute {
		return usageError(fmt.Sprintf("--gc-idle %v: want a minute or more (e.g. 30m)", c.gcIdle))
	}
	if err := c.log.Check(); err != nil {
		return usageError(err.Error())
	}
	if c.follow && !c.foreground && c.log.File == "" {
		return usageError("--follow writes nothing in the store, its log included: give --log-file or --foreground")
	}
	if err := c.cluster.check(c.follow, c.foreground || c.log.File != ""); err != nil {
		return err
	}
	if c.log.File != "" {
		c.log.File, err = filepath.Abs(c.log.File)
	}
	return err
}

// start serves, in this process with --foreground, else in a background
// one it waits for. What would refuse the mount is refused here, before
// any fork: a background start would otherwise report it only as "the
// server did not start".
func (c *mountConfig) start() error {
	if err := refuseDynamic(); err != nil {
		return err
	}
	if err := refuseUnsafeRoot(c.root); err != nil {
		return err
	}
	if err := mountlife.CanMount(); err != nil {
		return err
	}
	if c.log.File != "" { // a log file that would be refused is, before the store is touched
		f, err := logx.OpenFile(c.log.File)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := refuseServed(c.root, c.store, c.storeLock()); err != nil {
		return err
	}
	if !c.foreground {
		return startBackground(c)
	}
	return runServer(c)
}

// runServer is the foreground server with its log: on stderr unless
// --log-file names a file, where its end is logged too (on stderr the
// error that ends it is printed once, as ctxfs: …).
func runServer(c *mountConfig) error {
	// The server's own directories (the mountpoints, agent/, model/) are
	// made with 0755 and must stay writable by root alone: the root check
	// refuses anything wider at the next mount. An inherited umask of 002
	// would make them group-writable, so the server fixes its own.
	unix.Umask(0o022)
	// A descriptor whoever started us left open (a root-only file, a
	// terminal, a socket) must reach no program we start as a user: a
	// compact.d program is started without a trampoline, and it, and all
	// it starts, could write through it as the uid.
	trampoline.CloseOnExec()
	// A log line must never wait for stderr's reader (a stalled pipe or
	// terminal would stall the stop and its unmount): logx.Queue.
	stderr := logx.NonBlocking(os.Stderr)
	defer stderr.Close() // last: what is queued is written out, briefly
	log, logFile, err := logx.New(c.log, stderr)
	if err != nil {
		return err
	}
	if logFile != nil {
		defer logFile.Close()
	}
	slog.SetDefault(log) // the log package's lines (go-fuse's debug) go there too
	notify, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("systemd readiness off", "err", err)
	}
	err = serve(c, log, notify)
	switch {
	case err == nil:
		log.Info("stopped", "root", c.root)
	case logFile != nil:
		log.Error("stopped", "root", c.root, "err", err)
	}
	return err
}

// gcIdleLoop archives idle temp-* sessions every interval until stop
// (session.Engine.GCIdle).
func gcIdleLoop(e *session.Engine, interval time.Duration, log *slog.Logger, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for _, rel := range e.GCIdle(interval) {
				log.Info("gc-idle: archived", "session", rel)
			}
		}
	}
}

// refuseServed refuses a root or a store that a live server serves: its
// mounts are never touched. A dying server is not refused: the server we
// start waits for it to be gone (lockRoot, lockStore). A follower's store
// is served by its writer, and is not looked at here; a cluster host's is
// refused only when a single-host server holds it.
func refuseServed(root, store string, lock storeLock) error {
	h, _, err := rootHolder(root)
	if err != nil {
		return err
	}
	if h.live() {
		return servedError(root, h)
	}
	if err := refuseLiveMounts(root); err != nil {
		return err
	}
	if lock == lockNone {
		return nil
	}
	st, err := openServedStore(store, lock)
	if err != nil {
		return err
	}
	defer st.Close()
	if lock == lockShared {
		return refuseSingleServed(st)
	}
	return refuseServedStore(st)
}

// cpuProfile starts a CPU profile of the server into the file named (the
// benchmarks' way to see where a server's time goes); nil when none.
func cpuProfile(name string, log *slog.Logger) (stop func()) {
	if name == "" {
		return nil
	}
	f, err := os.Create(name)
	if err != nil {
		log.Error("CTXFS_CPUPROFILE", "err", err)
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Error("CTXFS_CPUPROFILE", "err", err)
		f.Close()
		return nil
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// allocProfile writes the profile of what the server allocated, from its
// start, into the file named when it stops (CTXFS_ALLOCPROFILE: where a
// send's garbage comes from); nil when none.
func allocProfile(name string, log *slog.Logger) (stop func()) {
	if name == "" {
		return nil
	}
	return func() {
		f, err := os.Create(name)
		if err == nil {
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
		if err != nil {
			log.Error("CTXFS_ALLOCPROFILE", "err", err)
		}
	}
}

// waitProfiles records where the server's goroutines wait for each other
// and writes it when the server stops, as NAME.mutex (who held a lock
// others waited for) and NAME.block (who waited: locks, channels,
// conditions): CTXFS_WAITPROFILE, the way to find what serialises sends
// that the CPU profile does not show (docs/benchmarks.md); nil when none.
func waitProfiles(name string, log *slog.Logger) (stop func()) {
	if name == "" {
		return nil
	}
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(10_000) // a sample per 10 µs waited
	return func() {
		for _, kind := range []string{"mutex", "block"} {
			f, err := os.Create(name + "." + kind)
			if err == nil {
				err = pprof.Lookup(kind).WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				log.Error("CTXFS_WAITPROFILE", "err", err)
			}
		}
	}
}

// serve runs the server in this process until SIGINT or SIGTERM, or until
// a mount of ours is taken away; with gcIdle, idle temp-* sessions are
// archived every gcIdle. It logs what it does, and tells systemd (notify,
// nil when not under it) when it is ready and when it stops.
func serve(c *mountConfig, log *slog.Logger, notify *sdnotify.Notifier) error {
	root, store := c.root, c.store
	self, err := os.Executable()
	if err != nil {
		return err
	}
	defer profiles(log)()
	agent.Enter = self // runs enter their directories after exec (agent.Enter)
	// Last, once the logs are closed: what the runs started in their
	// process groups goes with the server (a program's parent-death
	// signal reaches the program alone).
	defer agent.KillRunGroups()
	st, err := openServedStore(store, c.storeLock())
	if err != nil {
		return err
	}
	defer st.Close()
	pidf, err := lockRoot(root, store)
	if err != nil {
		return err
	}
	defer unlockRoot(root, pidf)
	if lock, err := c.storeLock().take(st, root); err != nil {
		return err
	} else if lock != nil {
		defer lock.Close()
	}
	log.Info("starting", "version", version(), "root", root, "store", store, "pid", os.Getpid(), "uid", os.Geteuid(), "follow", c.follow, "cluster", c.cluster.endpoints)
	if n := agent.SweepControls(""); n > 0 {
		log.Info("removed the control sockets of runs of servers gone", "count", n)
	}
	// From here on a SIGTERM (a `ctxfs umount` while we start) stops the
	// server once it serves, instead of killing it half mounted.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	if err := prepareMountpoints(root); err != nil {
		return err
	}
	srv, err := c.openServing(st, log)
	if err != nil {
		return err
	}
	defer srv.close()
	mounts, err := mountFS(srv.mount, root)
	if err != nil {
		return err
	}
	defer func() {
		if err := mounts.Unmount(); err != nil {
			log.Warn("unmount", "root", root, "err", err)
		}
		log.Info("unmounted", "root", root)
	}()
	for _, conn := range mounts.Conns() {
		log.Info("mounted", "dir", conn.Dir, "device", fmt.Sprintf("%d:%d", conn.Dev[0], conn.Dev[1]))
	}
	wd, err := startWatchdog(root, pidf, mounts.Conns(), log)
	if err != nil {
		return err
	}
	defer wd.Stop() // before the unmount: see mountlife.Watchdog.Stop
	if err := mountsAnswer(root); err != nil {
		return err
	}
	// The sockets come last: a client that reaches one may go on through
	// the mounts at once (a jailed run binds its session from them, a test
	// or a script makes a file there), so a socket that answers means the
	// tree is there. (Served the other way round, a mkdir -p made in that
	// gap went into the bare mountpoint and was hidden when the mount came
	// up.) They close first when the server stops. A follower serves none;
	// a cluster host's start without an engine and relay until it writes.
	if srv.sockets {
		stop, err := serveSockets(srv, root, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	c.serveUntilStopped(srv, mounts.Done(), sig, notify, log)
	return nil
}

// serveUntilStopped tells who waits that the server is ready, and serves
// (archiving idle sessions when asked) until a signal comes or a mount
// is taken away (unmounted).
func (c *mountConfig) serveUntilStopped(srv *serving, unmounted <-chan struct{}, sig <-chan os.Signal, notify *sdnotify.Notifier, log *slog.Logger) {
	// Logged first: what waiters do once told comes after it in the log.
	log.Info("ready", "root", c.root, "systemd", notify != nil)
	reportReady()
	if err := notify.Notify("READY=1"); err != nil {
		log.Warn("systemd readiness", "err", err)
	}
	if c.gcIdle > 0 && srv.writer != nil {
		stop := make(chan struct{})
		defer close(stop)
		go gcIdleLoop(srv.writer, c.gcIdle, log, stop)
	}
	select {
	case s := <-sig:
		log.Info("stopping", "signal", s.String())
	case <-unmounted:
		log.Warn("stopping: a mount was unmounted from outside the server", "root", c.root)
	}
	notify.Notify("STOPPING=1")
}

// serveSockets serves the sockets of srv's engine under root and starts
// it; stop drains it (a writer hands its store over while it still
// serves), then closes the sockets.
func serveSockets(srv *serving, root string, log *slog.Logger) (stop func(), err error) {
	socks, err := server.ServeSockets(srv.writer, root, log)
	if err != nil {
		return nil, err
	}
	if err := srv.start(socks); err != nil {
		socks.Close()
		return nil, err
	}
	return func() { srv.drain(); socks.Close() }, nil
}

// profiles starts the profiles the environment asks for (CTXFS_CPUPROFILE,
// CTXFS_ALLOCPROFILE, CTXFS_WAITPROFILE); stop writes them.
func profiles(log *slog.Logger) (stop func()) {
	cpu := cpuProfile(os.Getenv("CTXFS_CPUPROFILE"), log)
	allocs := allocProfile(os.Getenv("CTXFS_ALLOCPROFILE"), log)
	waits := waitProfiles(os.Getenv("CTXFS_WAITPROFILE"), log)
	return func() {
		if waits != nil {
			waits()
		}
		if allocs != nil {
			allocs()
		}
		if cpu != nil {
			cpu()
		}
	}
}

// mountsAnswer makes sure both mounts answer before anyone is told that
// the server is ready: a stat of each through the kernel, answered by
// this process.
func mountsAnswer(root string) error {
	for _, d := range mountpoints(root)[1:] {
		if _, err := os.Stat(d); err != nil {
			return fmt.Errorf("%s does not answer: %w", d, err)
		}
	}
	return nil
}

// prepareMountpoints makes root, root/home and root/shared ready to mount
// on: a dead server's mount there is cleaned up (a dead mount must never
// hang callers), and a live one, which no ctxfs of this root serves since
// we hold its lock, is refused rather than mounted over.
func prepareMountpoints(root string) error {
	for _, d := range mountpoints(root) {
		mountlife.CleanStale(d)
	}
	if err := refuseLiveMounts(root); err != nil {
		return err
	}
	for _, d := range mountpoints(root) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// mountpoints are root and the two mounts below it.
func mountpoints(root string) []string {
	return []string{root, filepath.Join(root, "home"), filepath.Join(root, "shared")}
}

// refuseLiveMounts refuses to mount over a live FUSE mount at root: with
// no live server holding root's pid file, it is someone else's.
func refuseLiveMounts(root string) error {
	for _, d := range mountpoints(root) {
		if mountlife.LiveFUSEMount(d) {
			return fmt.Errorf("%s is mounted by a live FUSE server that does not hold %s; unmount it first", d, pidFile(root))
		}
	}
	return nil
}

// reportReady tells a waiting background `ctxfs mount` that we serve.
func reportReady() {
	if os.Getenv("CTXFS_READY_FD") == "" {
		return
	}
	w := os.NewFile(readyFD, "ready")
	w.Write([]byte("ready\n"))
	w.Close()
}

// startBackground starts `ctxfs mount --foreground` detached from the
// terminal, with its output in <store>/ctxfs.log, and waits until it
// serves.
func startBackground(c *mountConfig) error {
	out, outPath, err := c.backgroundOutput()
	if err != nil {
		return err
	}
	defer out.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	self, _ := os.Executable()
	cmd := exec.Command(self, c.foregroundArgs()...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{w}
	// Only a server systemd started itself may speak to it.
	cmd.Env = append(withoutEnv(os.Environ(), "NOTIFY_SOCKET"), "CTXFS_READY_FD=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		ready <- line == "ready\n"
	}()
	select {
	case ok := <-ready:
		if ok && c.quiet {
			return nil
		}
		if ok {
			logPath := outPath
			if c.log.File != "" {
				logPath = c.log.File
			}
			fmt.Printf("ctxfs: serving %s (store %s, pid %d, log %s)\n", c.root, c.store, cmd.Process.Pid, logPath)
			return nil
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
	}
	tail, _ := os.ReadFile(outPath) // the operator's path, which Secure (or logx.OpenFile) checked
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return fmt.Errorf("the server did not start; its log (%s) ends:\n%s", outPath, tail)
}

// backgroundOutput is where the background server's stdout and stderr
// go: STORE/ctxfs.log, or for a follower or a cluster's host (which write
// nothing in the store outside a term) its --log-file.
func (c *mountConfig) backgroundOutput() (*os.File, string, error) {
	if c.follow || c.cluster.on() {
		f, err := logx.OpenFile(c.log.File)
		return f, c.log.File, err
	}
	st, err := storefs.OpenPrivate(c.store)
	if err != nil {
		return nil, "", err
	}
	defer st.Close()
	f, err := st.OpenFile(logName, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	return f, filepath.Join(c.store, logName), err
}

// foregroundArgs is the command line of the background server: this
// mount, in the foreground, every value explicit.
func (c *mountConfig) foregroundArgs() []string {
	args := []string{"mount", "--foreground", "--root", c.root, "--store", c.store,
		"--log-level", c.log.Level, "--log-format", c.log.Format}
	if c.gcIdle > 0 {
		args = append(args, "--gc-idle", c.gcIdle.String())
	}
	if c.log.File != "" {
		args = append(args, "--log-file", c.log.File)
	}
	if c.follow {
		args = append(args, "--follow")
	}
	return append(args, c.cluster.args()...)
}

// withoutEnv is env without the variable name.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
