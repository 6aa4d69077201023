package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// A MooseFS 3 cluster for the tests, on this one machine: its master and
// chunkserver run inside a network namespace the test makes, reached over
// a veth pair with addresses of the test's own (the chunkserver refuses a
// loopback address for its link to the master), and two mfsmount clients
// on the host stand in for two hosts. Everything lives under t.TempDir and
// is stopped by PID in t.Cleanup; every wait is bounded, and the clients
// turn a master that stops answering into EIO (mfstimeout) rather than a
// hang.

// moosefs is one running cluster: the two client mounts and the master's
// address they use.
type moosefs struct {
	a, b   string // the two mfsmount mountpoints ("host A", "host B")
	master string // the master's address inside the namespace
	dir    string // config, data and logs
	mounts dfsClients
}

// mfsClientTimeout is mfsmount's mfstimeout: an operation the master does
// not answer within it fails with EIO instead of blocking the test.
const mfsClientTimeout = 30

// requireMooseFS skips a test when the MooseFS packages (or root, or ip)
// are missing; with CTXFS_REQUIRE_MOOSEFS=1 (CI) it fails instead.
func requireMooseFS(t testing.TB) {
	t.Helper()
	requireTools(t, "MooseFS", "moosefs-master, moosefs-chunkserver, moosefs-client", "CTXFS_REQUIRE_MOOSEFS",
		"mfsmaster", "mfschunkserver", "mfsmount", "ip", mfsEmptyMetadata)
}

// mfsEmptyMetadata is the empty filesystem moosefs-master ships: a new
// master starts from a copy of it.
const mfsEmptyMetadata = "/var/lib/mfs/metadata.mfs.empty"

// startMooseFS starts a cluster and returns it once both client mounts
// are up and a file written through one is read through the other.
func startMooseFS(t testing.TB) *moosefs {
	t.Helper()
	requireMooseFS(t)
	nn := testkit.MakeNetNS(t, "mfs") // deleted after the cleanup below
	m := &moosefs{dir: t.TempDir(), master: nn.NSAddr, mounts: dfsClients{}}
	openToAll(t, filepath.Join(m.dir, "x"))
	os.Chmod(m.dir, 0o755)
	var daemons []*exec.Cmd
	t.Cleanup(func() {
		m.mounts.unmountAll(t)
		for i := len(daemons) - 1; i >= 0; i-- { // the chunkserver, then the master
			killGroup(daemons[i])
		}
	})
	m.writeConfig(t)
	daemons = append(daemons, m.startDaemon(t, nn.Name, "mfsmaster"))
	daemons = append(daemons, m.startDaemon(t, nn.Name, "mfschunkserver"))
	// A write before the chunkserver has scanned its folder and registered
	// waits for chunk space (mfsmount retries "No space left" on and on).
	eventually(t, 30*time.Second, "the chunkserver scanned its folder and registered with the master", func() bool {
		master, _ := os.ReadFile(filepath.Join(m.dir, "mfsmaster.log"))
		cs, _ := os.ReadFile(filepath.Join(m.dir, "mfschunkserver.log"))
		return strings.Contains(string(master), "chunkserver register end") && strings.Contains(string(cs), ": complete")
	})
	m.a, m.b = m.mount(t, "a"), m.mount(t, "b")
	waitShared(t, m.a, m.b) // the chunkserver has reported its space
	// A new volume's root is 0777; a store's server refuses a directory
	// above its store that every user may write.
	testkit.Must(t, os.Chmod(m.a, 0o755))
	return m
}

// writeConfig writes the master's and the chunkserver's config: they run
// as root (their data is under the test's temporary directory), listen on
// the namespace's address only, and the chunkserver stores its chunks in
// a directory of its own, leaving 1 GiB of the disk free. (A size cap on
// that line, "PATH 2GiB", made the chunkserver report its space as all
// used, and every write waited for space.)
func (m *moosefs) writeConfig(t testing.TB) {
	for _, d := range []string{"master", "chunkserver", "hdd"} {
		testkit.Must(t, os.MkdirAll(filepath.Join(m.dir, d), 0o755))
	}
	meta, err := os.ReadFile(mfsEmptyMetadata)
	testkit.Must(t, err)
	files := map[string]string{
		"master/metadata.mfs": string(meta),
		"mfsexports.cfg":      "*\t/\trw,alldirs,admin,maproot=0:0\n",
		"mfstopology.cfg":     "",
		"mfshdd.cfg":          filepath.Join(m.dir, "hdd") + "\n",
		"mfsmaster.cfg": mfsConfig(map[string]string{
			"DATA_PATH":          filepath.Join(m.dir, "master"),
			"EXPORTS_FILENAME":   filepath.Join(m.dir, "mfsexports.cfg"),
			"TOPOLOGY_FILENAME":  filepath.Join(m.dir, "mfstopology.cfg"),
			"MATOML_LISTEN_HOST": m.master,
			"MATOCS_LISTEN_HOST": m.master,
			"MATOCL_LISTEN_HOST": m.master,
		}),
		"mfschunkserver.cfg": mfsConfig(map[string]string{
			"DATA_PATH":               filepath.Join(m.dir, "chunkserver"),
			"HDD_CONF_FILENAME":       filepath.Join(m.dir, "mfshdd.cfg"),
			"HDD_LEAVE_SPACE_DEFAULT": "1GiB",
			"MASTER_HOST":             m.master,
			"BIND_HOST":               m.master,
			"CSSERV_LISTEN_HOST":      m.master,
		}),
	}
	for name, text := range files {
		testkit.Must(t, os.WriteFile(filepath.Join(m.dir, name), []byte(text), 0o644))
	}
}

// mfsConfig is a daemon's config file: these keys, and those every daemon
// here shares (root, no priority or memory games, no syslog name clash).
func mfsConfig(keys map[string]string) string {
	var b strings.Builder
	for k, v := range map[string]string{"WORKING_USER": "root", "WORKING_GROUP": "root", "NICE_LEVEL": "0", "LOCK_MEMORY": "0"} {
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	for k, v := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	return b.String()
}

// startDaemon runs mfsmaster or mfschunkserver in the foreground inside
// the namespace (ip netns exec execs it: the PID is the daemon's), its
// output in NAME.log.
func (m *moosefs) startDaemon(t testing.TB, ns, name string) *exec.Cmd {
	log, err := os.Create(filepath.Join(m.dir, name+".log"))
	testkit.Must(t, err)
	defer log.Close()
	cmd := exec.Command("ip", "netns", "exec", ns, name, "-c", filepath.Join(m.dir, name+".cfg"), "-f", "start")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = testkit.ChildAttr()
	testkit.Must(t, cmd.Start())
	return cmd
}

// mount starts one mfsmount client in the foreground on a new directory
// and waits for its mount.
func (m *moosefs) mount(t testing.TB, name string) string {
	return m.mountWith(t, name, fmt.Sprintf("mfstimeout=%d,default_permissions", mfsClientTimeout))
}

// mountWith is mount with the -o options given. A store's client needs
// default_permissions: without it mfsmount leaves permission checks to
// the master, which let other users look inside a 0700 store.
func (m *moosefs) mountWith(t testing.TB, name, options string) string {
	dir := filepath.Join(m.dir, "mnt-"+name)
	testkit.Must(t, os.MkdirAll(dir, 0o755))
	log, err := os.Create(filepath.Join(m.dir, "mfsmount-"+name+".log"))
	testkit.Must(t, err)
	defer log.Close()
	cmd := exec.Command("mfsmount", "-f", dir, "-H", m.master, "-P", "9421",
		"-o", options)
	cmd.Stdout, cmd.Stderr = log, log
	m.mounts.start(t, dir, cmd)
	return dir
}

// runBounded runs a set-up command with a deadline and returns its output.
func runBounded(t testing.TB, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// killGroup SIGKILLs a daemon's process group (the master forks a data
// writer) by its id, and reaps the daemon.
func killGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// mfsCounters reads a MooseFS client's own counters (the .stats file at
// the root of its mount): the FUSE requests it has served and the
// packets it has sent to the master.
func mfsCounters(tb testing.TB, mnt string) (fuseOps, toMaster int64) {
	data, err := os.ReadFile(filepath.Join(mnt, ".stats"))
	testkit.Must(tb, err)
	counter := func(name string) int64 {
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(line, name+": "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				testkit.Must(tb, err)
				return n
			}
		}
		tb.Fatalf("%s/.stats has no %s", mnt, name)
		return 0
	}
	return counter("fuse_ops"), counter("master.packets_sent")
}

// mfsLoopCounts runs MooseFS's own append+fdatasync loop (syncLoop) on
// the volume at mnt for 0.5 s, and returns what each of its appends
// asked of the client (as mfsCounters counts) and its appends a second.
func mfsLoopCounts(b *testing.B, mnt string) (opsPerSync, masterPerSync, perSecond float64) {
	ops0, master0 := mfsCounters(b, mnt)
	n, el := syncLoop(b, filepath.Join(mnt, "store"), 500*time.Millisecond)
	ops1, master1 := mfsCounters(b, mnt)
	return float64(ops1-ops0) / float64(n), float64(master1-master0) / float64(n), float64(n) / el.Seconds()
}
