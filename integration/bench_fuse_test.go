package integration

// Benchmarks of the files through the mount (issue 3). Every benchmark
// measures ctxfs and the native reference side by side in the same loop
// (each iteration does one operation on each side), so that a noisy,
// shared machine disturbs both alike, and reports both rates and their
// ratio with b.ReportMetric. Read the ratios, not the absolute numbers.
//
// Metric names: "<side>-MiB/s" or "<side>-ops/s" is a rate; "a/b" is the
// rate of a divided by the rate of b (1.0 = as fast; 0.5 = half as fast).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ctxfs/ctxfs/internal/testkit"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// benchSessions is root's coder session container, relative to the mount
// root and to the store.
const benchSessions = "home/0/agent/coder/session"

// benchRequireFUSE skips a benchmark that needs to mount as root.
func benchRequireFUSE(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("not root: the benchmarks mount FUSE directly and drop caches")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		b.Skipf("/dev/fuse: %v", err)
	}
	f.Close()
}

// benchFuseServer starts a server whose root has made one session
// ("warm", by a send), so that its coder session container exists.
func benchFuseServer(b *testing.B) *server {
	b.Helper()
	benchRequireFUSE(b)
	s := benchServer(b)
	s.mustRequest("coder", `{"op":"send","id":"warm","session":"warm","input":"x"}`)
	return s
}

// benchMnt and benchStore are the paths of one session file (or of the
// container, with no name) through the mount and in the store.
func benchMnt(s *server, rel ...string) string {
	return filepath.Join(append([]string{s.root, benchSessions}, rel...)...)
}

func benchStore(s *server, rel ...string) string {
	return filepath.Join(append([]string{s.store, benchSessions}, rel...)...)
}

// benchNewSession makes a session through the mount (mkdir).
func benchNewSession(b *testing.B, s *server, name string) {
	b.Helper()
	if err := os.Mkdir(benchMnt(s, name), 0o700); err != nil {
		b.Fatalf("mkdir session %s: %v\n%s", name, err, s.logText())
	}
}

// side is one contender of a side-by-side benchmark: its accumulated time
// and amount of work.
type side struct {
	name  string
	d     time.Duration
	ops   int
	bytes int64
}

// time runs f once, adding its duration to the side.
func (sd *side) time(f func() (int64, error)) error {
	t0 := time.Now()
	n, err := f()
	sd.d += time.Since(t0)
	sd.ops++
	sd.bytes += n
	return err
}

// interleave runs every side's step once per iteration, b.N times, in an
// order shuffled anew for each iteration from a fixed seed. A side's time
// depends on what ran just before it (the one after an fdatasync is the
// faster for it: docs/benchmarks.md, "Which side goes first"), so a fixed
// order would favour whichever side it puts there. It stops the benchmark
// at the first error, naming the side.
func interleave(b *testing.B, sides []*side, step func(j int) (int64, error)) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, len(sides))
	for j := range order {
		order[j] = j
	}
	for i := 0; i < b.N; i++ {
		rng.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
		for _, j := range order {
			if err := sides[j].time(func() (int64, error) { return step(j) }); err != nil {
				b.Fatalf("%s: %v", sides[j].name, err)
			}
		}
	}
}

func (sd *side) opsPerSec() float64 { return float64(sd.ops) / sd.d.Seconds() }
func (sd *side) mibPerSec() float64 { return float64(sd.bytes) / (1 << 20) / sd.d.Seconds() }

// reportOps reports each side's ops/s and, for each side after the first
// of refs, its ratio to every reference.
func reportOps(b *testing.B, subject *side, refs ...*side) {
	b.ReportMetric(subject.opsPerSec(), subject.name+"-ops/s")
	for _, r := range refs {
		b.ReportMetric(r.opsPerSec(), r.name+"-ops/s")
		b.ReportMetric(subject.opsPerSec()/r.opsPerSec(), subject.name+"/"+r.name)
	}
}

// dropCaches writes back dirty data and drops the page, dentry and inode
// caches of the whole machine (FUSE pages included).
func dropCaches(b *testing.B) {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		b.Fatalf("drop caches: %v", err)
	}
}

// readAll reads a file sequentially with buf (1 MiB), as cat or cp would.
func readAll(p string, buf []byte) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// jsonLines returns size bytes of valid message lines, each lineLen bytes
// long including its newline.
func jsonLines(size, lineLen int) []byte {
	head, tail := `{"role":"user","run":"bench","content":"`, "\"}\n"
	line := head + string(bytes.Repeat([]byte("x"), lineLen-len(head)-len(tail))) + tail
	return bytes.Repeat([]byte(line), size/lineLen)
}

// ---------------------------------------------------------------------
// 1. Sequential read of a 512 MiB messages.jsonl.

// refLoopback is the reference go-fuse loopback: how a plain go-fuse
// filesystem serves the same file. passthrough leaves go-fuse's default
// (as root the kernel then reads the backing file itself); otherwise the
// file handle hides its fd and every read goes through the server, with
// FOPEN_KEEP_CACHE when keepCache is set.
type refLoopback struct {
	gofs.LoopbackNode
	passthrough, keepCache bool
}

func (n *refLoopback) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 || n.passthrough {
		return fh, fl, errno
	}
	if n.keepCache {
		fl |= fuse.FOPEN_KEEP_CACHE
	}
	return &serverFile{fh}, fl, 0
}

// serverFile is a loopback file without PassthroughFd.
type serverFile struct{ f gofs.FileHandle }

var (
	_ = (gofs.FileReader)((*serverFile)(nil))
	_ = (gofs.FileReleaser)((*serverFile)(nil))
	_ = (gofs.FileGetattrer)((*serverFile)(nil))
	_ = (gofs.FileFlusher)((*serverFile)(nil))
	_ = (gofs.FileWriter)((*serverFile)(nil))
	_ = (gofs.FileFsyncer)((*serverFile)(nil))
)

func (h *serverFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.f.(gofs.FileReader).Read(ctx, dest, off)
}
func (h *serverFile) Release(ctx context.Context) syscall.Errno {
	return h.f.(gofs.FileReleaser).Release(ctx)
}
func (h *serverFile) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.f.(gofs.FileGetattrer).Getattr(ctx, out)
}
func (h *serverFile) Flush(ctx context.Context) syscall.Errno {
	return h.f.(gofs.FileFlusher).Flush(ctx)
}
func (h *serverFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return h.f.(gofs.FileWriter).Write(ctx, data, off)
}
func (h *serverFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.f.(gofs.FileFsyncer).Fsync(ctx, flags)
}

// mountLoopback mounts a reference loopback of dir in this process and
// returns its mount point; it is unmounted at cleanup.
func mountLoopback(b *testing.B, dir string, passthrough, keepCache bool) string {
	b.Helper()
	mnt := b.TempDir()
	srv, err := newLoopback(dir, mnt, passthrough, keepCache)
	if err != nil {
		b.Fatalf("mount loopback: %v", err)
	}
	b.Cleanup(func() {
		if srv.Unmount() != nil {
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	return mnt
}

// newLoopback mounts a reference loopback of dir on mnt.
func newLoopback(dir, mnt string, passthrough, keepCache bool) (*fuse.Server, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return nil, err
	}
	root := &gofs.LoopbackRoot{Path: dir, Dev: uint64(st.Dev)}
	root.NewNode = func(r *gofs.LoopbackRoot, _ *gofs.Inode, _ string, _ *syscall.Stat_t) gofs.InodeEmbedder {
		return &refLoopback{LoopbackNode: gofs.LoopbackNode{RootData: r}, passthrough: passthrough, keepCache: keepCache}
	}
	rootNode := root.NewNode(root, nil, "", &st)
	root.RootNode = rootNode
	sec := time.Second
	return gofs.Mount(mnt, rootNode, &gofs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			FsName:            "benchloop",
			DirectMountStrict: true,
			DisableXAttrs:     true,
		},
	})
}

// BenchmarkSeqRead: a 512 MiB messages.jsonl read from start to end with
// a 1 MiB buffer, two logs: "mount", built through the mount with 1 MiB
// O_APPEND writes of 1 KiB lines (see BenchmarkAppend/1MiB for that rate),
// and "sends", built by sends of 400 KiB inputs to the echo model (each a
// user line and the model's answer). Each is read natively (the store file
// itself, on the same ext4), through the ctxfs mount, and through two
// go-fuse loopbacks of the session's store directory, each served by a
// process of its own as ctxfs is (spawnRef): "loopkc" (every open with
// FOPEN_KEEP_CACHE, its handle hiding its descriptor: a FUSE page cache at
// its best; a handle that offers it is made passthrough by go-fuse as
// root, which drops FOPEN_KEEP_CACHE) and "looppt" (go-fuse's default as
// root: kernel passthrough). warm: each
// file was read once before (warmSideBySide), and the timed reads are the
// second and later ones. cold: all caches are dropped before each timed
// read.
func BenchmarkSeqRead(b *testing.B) {
	s := benchFuseServer(b)
	logs := []struct {
		name  string
		build func(b *testing.B, s *server, session string)
	}{
		{"mount", buildLogThroughMount},
		{"sends", buildLogBySends},
	}
	for _, lg := range logs {
		t0 := time.Now()
		lg.build(b, s, "big-"+lg.name)
		native := benchStore(s, "big-"+lg.name, "messages.jsonl")
		st, err := os.Stat(native)
		if err != nil || st.Size() < seqReadSize {
			b.Fatalf("store file of the %s log: %v %v", lg.name, st, err)
		}
		b.Logf("built the %s log (%d MiB) in %v", lg.name, st.Size()>>20, time.Since(t0).Round(time.Millisecond))
		dir := filepath.Dir(native)
		targets := []struct{ name, path string }{
			{"native", native},
			{"ctxfs", benchMnt(s, "big-"+lg.name, "messages.jsonl")},
			{"loopkc", filepath.Join(spawnRef(b, nil, "loopkc", dir), "messages.jsonl")},
			{"looppt", filepath.Join(spawnRef(b, nil, "looppt", dir), "messages.jsonl")},
		}
		b.Run(lg.name, func(b *testing.B) { benchSeqReads(b, targets, st.Size()) })
	}
}

// seqReadSize is the least size of BenchmarkSeqRead's logs.
const seqReadSize = 512 << 20

// buildLogThroughMount makes session and appends 512 MiB of 1 KiB lines
// to its log through the mount, 1 MiB a write.
func buildLogThroughMount(b *testing.B, s *server, session string) {
	benchNewSession(b, s, session)
	f, err := os.OpenFile(benchMnt(s, session, "messages.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(b, err)
	chunk := jsonLines(1<<20, 1024)
	for n := 0; n < seqReadSize; n += len(chunk) {
		if _, err := f.Write(chunk); err != nil {
			b.Fatalf("append: %v", err)
		}
	}
	testkit.Must(b, f.Close())
	// Each 1 KiB line is stored with its writer's uid (root's: ,"uid":0).
	stored := int64(seqReadSize + seqReadSize/1024*len(`,"uid":0`))
	if st, err := os.Stat(benchStore(s, session, "messages.jsonl")); err != nil || st.Size() != stored {
		b.Fatalf("store file: %v %v, want %d bytes", st, err, stored)
	}
}

// buildLogBySends sends 400 KiB inputs to session until its log holds
// 512 MiB: the engine appends each user line and the echo model's answer.
func buildLogBySends(b *testing.B, s *server, session string) {
	input := strings.Repeat("y", 400<<10)
	log := benchStore(s, session, "messages.jsonl")
	for i := 0; ; i++ {
		if st, err := os.Stat(log); err == nil && st.Size() >= seqReadSize {
			return
		}
		s.send(session, fmt.Sprintf("s%d", i), input)
	}
}

// benchSeqReads reads each target whole, in turn, warm and cold, and
// reports each one's rate and its ratio to native's, and ctxfs's to
// loopkc's (targets: native, ctxfs, loopkc, then others).
func benchSeqReads(b *testing.B, targets []struct{ name, path string }, size int64) {
	buf := make([]byte, 1<<20)
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			sides := make([]*side, len(targets))
			for i, t := range targets {
				sides[i] = &side{name: t.name}
			}
			if mode == "warm" {
				warmSideBySide(b, targets[0].path, pathsOf(targets[1:]), buf)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if mode == "warm" {
					readInterleaved(b, targets, sides, size, buf)
				}
				for j, t := range targets {
					if mode == "cold" {
						b.StopTimer()
						dropCaches(b)
						b.StartTimer()
						if err := sides[j].time(func() (int64, error) { return readAll(t.path, buf) }); err != nil {
							b.Fatalf("read %s: %v", t.name, err)
						}
					}
					if sides[j].bytes != int64(i+1)*size {
						b.Fatalf("%s: read %d bytes, want %d", t.name, sides[j].bytes, int64(i+1)*size)
					}
				}
			}
			b.StopTimer()
			nat := sides[0]
			b.ReportMetric(nat.mibPerSec(), "native-MiB/s")
			for _, sd := range sides[1:] {
				b.ReportMetric(sd.mibPerSec(), sd.name+"-MiB/s")
				b.ReportMetric(sd.mibPerSec()/nat.mibPerSec(), sd.name+"/native")
			}
			b.ReportMetric(sides[1].mibPerSec()/sides[2].mibPerSec(), "ctxfs/loopkc")
			if mode == "warm" {
				for _, t := range targets[:3] {
					if c, large, ok := pagesLie(b, t.path); ok {
						b.ReportMetric(c, t.name+"-consecutive")
						b.ReportMetric(large, t.name+"-large")
					}
				}
			}
		})
	}
}

// readInterleaved reads every target whole (size bytes), sequentially,
// one read of buf's length of each in turn, and adds to each side the
// time of its own open, reads and close (docs/benchmarks.md#seqread): a
// whole 512 MiB read of one side after another caught the load of other
// processes in one side and not in the next. Each turn starts with the
// next side (the read right after native's was the slower of two FUSE
// files, whichever it was), and side j starts j/n of the way into its
// file and wraps around: native and looppt read the same pages of the
// store file, and one read right after the other found them in the CPU's
// cache (300 MiB of L3 here).
func readInterleaved(b *testing.B, targets []struct{ name, path string }, sides []*side, size int64, buf []byte) {
	type reading struct {
		f         *os.File
		pos, left int64
	}
	rs := make([]reading, len(targets))
	chunk := int64(len(buf))
	for j, t := range targets {
		rs[j] = reading{pos: size * int64(j) / int64(len(targets)) / chunk * chunk, left: size}
		sides[j].time(func() (n int64, err error) {
			rs[j].f, err = os.Open(t.path)
			return 0, err
		})
		if rs[j].f == nil {
			b.Fatalf("open %s", t.name)
		}
	}
	for turn, live := 0, len(rs); live > 0; turn++ {
		live = 0
		for k := range rs {
			j := (turn + k) % len(rs)
			r := &rs[j]
			if r.f == nil {
				continue
			}
			err := sides[j].time(func() (int64, error) {
				n, err := r.f.ReadAt(buf[:min(chunk, size-r.pos)], r.pos)
				r.pos, r.left = (r.pos+int64(n))%size, r.left-int64(n)
				if r.left == 0 {
					err = r.f.Close()
				}
				return int64(n), err
			})
			if err != nil {
				b.Fatalf("read %s: %v", targets[j].name, err)
			}
			if r.left == 0 {
				r.f = nil
				continue
			}
			live++
		}
	}
}

// pathsOf lists the targets' paths.
func pathsOf(targets []struct{ name, path string }) []string {
	var ps []string
	for _, t := range targets {
		ps = append(ps, t.path)
	}
	return ps
}

// warmSideBySide fills the page caches for a warm read: the native file
// alone, then the FUSE files side by side, one 1 MiB read of each in turn,
// after dropping what the kernel cached of them. The kernel caches a FUSE
// file in single 4 KiB pages (kernel 6.18: no large folios for FUSE), and
// a warm read copies them out at a speed that follows how they lie in
// physical memory: filled one file after another, the first file filled
// after the 512 MiB build got pages 53-58% physically consecutive and the
// ones after it 88-95%, and whichever came first read at about half the
// speed of the others (ctxfs first: ctxfs 0.29 of native, loopkc 0.63;
// loopkc first: ctxfs 0.59, loopkc 0.31). Filled side by side they share
// the allocator's state (in eight runs 34-83% consecutive, ctxfs's and
// loopkc's within 0.01 of each other), so the ratios compare the
// filesystems, not the order.
func warmSideBySide(b *testing.B, native string, fuse []string, buf []byte) {
	b.Helper()
	if _, err := readAll(native, buf); err != nil {
		b.Fatal(err)
	}
	var files []*os.File
	for _, p := range fuse {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatalf("drop the cache of %s: %v", p, err)
		}
		files = append(files, f)
	}
	for live := len(files); live > 0; {
		live = 0
		for _, f := range files {
			n, err := f.Read(buf)
			if err != nil && err != io.EOF {
				b.Fatal(err)
			}
			if n > 0 {
				live++
			}
		}
	}
}

// pageSink keeps the loads that map a file's pages from being compiled
// away.
var pageSink byte

// pagesLie reports how the pages the kernel caches of p lie in physical
// memory (from /proc/self/pagemap and /proc/kpageflags, which show them
// to root only): consecutive is the share that follow the previous page
// of the file, what the speed of a warm FUSE read follows
// (warmSideBySide); large is the share that belong to a folio of more
// than one page (a compound page). ok is false when the frames are
// hidden.
func pagesLie(b *testing.B, p string) (consecutive, large float64, ok bool) {
	b.Helper()
	f, err := os.Open(p)
	testkit.Must(b, err)
	defer f.Close()
	st, err := f.Stat()
	testkit.Must(b, err)
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	testkit.Must(b, err)
	defer unix.Munmap(m)
	pages := len(m) / os.Getpagesize()
	for i := 0; i < len(m); i += os.Getpagesize() {
		pageSink += m[i] // map every (cached) page
	}
	pm, err := os.Open("/proc/self/pagemap")
	testkit.Must(b, err)
	defer pm.Close()
	ents := make([]byte, 8*pages)
	start := uintptr(unsafe.Pointer(&m[0])) / uintptr(os.Getpagesize())
	if _, err := pm.ReadAt(ents, int64(start)*8); err != nil {
		b.Fatalf("pagemap: %v", err)
	}
	kf, err := os.Open("/proc/kpageflags")
	testkit.Must(b, err)
	defer kf.Close()
	const compound = 1<<15 | 1<<16 // KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL
	nConsecutive, nLarge, prev, flags := 0, 0, uint64(0), make([]byte, 8)
	for i := 0; i < pages; i++ {
		pfn := binary.LittleEndian.Uint64(ents[8*i:]) & (1<<55 - 1)
		if pfn == 0 {
			return 0, 0, false
		}
		if pfn == prev+1 {
			nConsecutive++
		}
		prev = pfn
		if _, err := kf.ReadAt(flags, int64(pfn)*8); err != nil {
			b.Fatalf("kpageflags: %v", err)
		}
		if binary.LittleEndian.Uint64(flags)&compound != 0 {
			nLarge++
		}
	}
	return float64(nConsecutive) / float64(pages), float64(nLarge) / float64(pages), true
}

// ---------------------------------------------------------------------
// 2. Appends.

// BenchmarkAppend: lines appended to messages.jsonl through the mount,
// against the same lines appended natively to an ext4 file beside the
// store, with fdatasync after each write ("sync", what a durable append
// costs) and without ("nosync", the page cache only), and through a plain
// go-fuse loopback of that directory ("loop": what any FUSE server pays,
// without validation or a journal), served like ctxfs by a process of its
// own (spawnRef); "loop-here" is the same loopback served by the
// benchmark's process, which saves a switch between processes per round
// trip (what this row compared with until 2026-12-01 16:00).
//
//	fd:         one descriptor opened O_APPEND, one 200-byte line per write
//	open-close: open(O_WRONLY|O_CREAT|O_APPEND), write one 200-byte line,
//	            close: what `echo ... >> messages.jsonl` does
//	1MiB:       one descriptor, 1 MiB writes of 1 KiB lines (how
//	            BenchmarkSeqRead builds its log); rates in MiB/s
func BenchmarkAppend(b *testing.B) {
	s := benchFuseServer(b)
	nativeDir := filepath.Join(filepath.Dir(s.store), "native")
	testkit.Must(b, os.MkdirAll(nativeDir, 0o700))
	line := jsonLines(200, 200)
	big := jsonLines(1<<20, 1024)
	loop := spawnRef(b, nil, "loop", nativeDir)
	loopHere := mountLoopback(b, nativeDir, false, false)
	for _, c := range []struct {
		name  string
		data  []byte
		reuse bool // one descriptor for the whole loop
	}{
		{"fd", line, true},
		{"open-close", line, false},
		{"1MiB", big, true},
	} {
		benchNewSession(b, s, "a-"+c.name)
		paths := []string{
			benchMnt(s, "a-"+c.name, "messages.jsonl"),
			filepath.Join(nativeDir, c.name+"-sync.jsonl"),
			filepath.Join(nativeDir, c.name+"-nosync.jsonl"),
			filepath.Join(loop, c.name+"-loop.jsonl"),
			filepath.Join(loopHere, c.name+"-loophere.jsonl"),
		}
		b.Run(c.name, func(b *testing.B) {
			sides := []*side{{name: "ctxfs"}, {name: "sync"}, {name: "nosync"}, {name: "loop"}, {name: "loop-here"}}
			files := make([]*os.File, len(paths))
			open := func(j int) *os.File {
				f, err := os.OpenFile(paths[j], os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
			if c.reuse {
				for j := range files {
					files[j] = open(j)
				}
			}
			b.ResetTimer()
			interleave(b, sides, func(j int) (int64, error) {
				f := files[j]
				if !c.reuse {
					f = open(j)
				}
				n, err := f.Write(c.data)
				if err == nil && j == 1 {
					err = unix.Fdatasync(int(f.Fd()))
				}
				if !c.reuse {
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				return int64(n), err
			})
			b.StopTimer()
			for _, f := range files {
				if f != nil {
					f.Close()
				}
			}
			if c.reuse && len(c.data) >= 1<<20 {
				for _, sd := range sides {
					b.ReportMetric(sd.mibPerSec(), sd.name+"-MiB/s")
				}
				b.ReportMetric(sides[0].mibPerSec()/sides[1].mibPerSec(), "ctxfs/sync")
				b.ReportMetric(sides[0].mibPerSec()/sides[2].mibPerSec(), "ctxfs/nosync")
				b.ReportMetric(sides[0].mibPerSec()/sides[3].mibPerSec(), "ctxfs/loop")
				b.ReportMetric(sides[0].mibPerSec()/sides[4].mibPerSec(), "ctxfs/loop-here")
				return
			}
			reportOps(b, sides[0], sides[1:]...)
			reportJournal(b, nativeDir)
		})
	}
}

// ---------------------------------------------------------------------
// 3. Small files and big directories.

// BenchmarkCatState: `cat state` in a loop — open, read to EOF with a
// 4 KiB buffer, close — of a session's state file through the mount
// against the store file natively, and against reference go-fuse files
// of the same bytes, with their attributes and pages kept by the kernel:
// "refopen" answers OPEN (no handle, FOPEN_KEEP_CACHE|FOPEN_NOFLUSH: an
// OPEN and a background RELEASE per cat, what ctxfs does), "refnoopen"
// answers ENOSYS to its first OPEN and FLUSH, which the kernel takes as
// no-open and no-flush for the whole connection: no round trip at all,
// the ceiling a FUSE file can reach here, and one ctxfs cannot take
// (fs/value.go, openCopy). Both are served by a process of their own,
// as ctxfs is (spawnSmallFile); "refopen-here" is refopen served by this
// process, whose round trips are cheaper (no switch of address space:
// see spawnSmallFile).
func BenchmarkCatState(b *testing.B) {
	s := benchFuseServer(b)
	benchNewSession(b, s, "st")
	data := []byte("idle\n")
	paths := []string{benchMnt(s, "st", "state"), benchStore(s, "st", "state"),
		spawnSmallFile(b, data, false), spawnSmallFile(b, data, true), mountSmallFile(b, data, false)}
	buf := make([]byte, 4096)
	sides := []*side{{name: "ctxfs"}, {name: "native"}, {name: "refopen"}, {name: "refnoopen"}, {name: "refopen-here"}}
	for _, p := range paths {
		if n, err := readAll(p, buf); err != nil || n != int64(len(data)) {
			b.Fatalf("%s: %d bytes, %v", p, n, err)
		}
	}
	b.ResetTimer()
	interleave(b, sides, func(j int) (int64, error) { return readAll(paths[j], buf) })
	b.StopTimer()
	reportOps(b, sides[0], sides[1], sides[2])
	for _, ref := range sides[2:] {
		b.ReportMetric(ref.opsPerSec()/sides[1].opsPerSec(), ref.name+"/native")
	}
}

// smallFile is a reference go-fuse file of fixed bytes whose attributes
// the kernel keeps for an hour and whose reads it serves from its page
// cache. With noOpen, OPEN and FLUSH answer ENOSYS.
type smallFile struct {
	gofs.Inode
	data   []byte
	noOpen bool
}

var (
	_ = (gofs.NodeGetattrer)((*smallFile)(nil))
	_ = (gofs.NodeOpener)((*smallFile)(nil))
	_ = (gofs.NodeReader)((*smallFile)(nil))
	_ = (gofs.NodeFlusher)((*smallFile)(nil))
)

func (n *smallFile) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = uint64(len(n.data))
	out.SetTimeout(time.Hour)
	return 0
}

func (n *smallFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if n.noOpen {
		return nil, 0, syscall.ENOSYS
	}
	return nil, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

func (n *smallFile) Read(ctx context.Context, f gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(n.data)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(n.data[off:]), 0
}

func (n *smallFile) Flush(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	if n.noOpen {
		return syscall.ENOSYS
	}
	return 0
}

// smallRoot holds one smallFile, "state".
type smallRoot struct {
	gofs.Inode
	file *smallFile
}

func (r *smallRoot) OnAdd(ctx context.Context) {
	r.AddChild("state", r.NewPersistentInode(ctx, r.file, gofs.StableAttr{Mode: syscall.S_IFREG}), false)
}

// mountSmallFile mounts a smallFile holding data in this process and
// returns its path; it is unmounted at cleanup.
func mountSmallFile(b *testing.B, data []byte, noOpen bool) string {
	b.Helper()
	mnt := b.TempDir()
	srv, err := mountSmall(mnt, data, noOpen)
	if err != nil {
		b.Fatalf("mount reference file: %v", err)
	}
	b.Cleanup(func() {
		if srv.Unmount() != nil {
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
	})
	return filepath.Join(mnt, "state")
}

func mountSmall(mnt string, data []byte, noOpen bool) (*fuse.Server, error) {
	hour := time.Hour
	return gofs.Mount(mnt, &smallRoot{file: &smallFile{data: data, noOpen: noOpen}}, &gofs.Options{
		EntryTimeout: &hour,
		AttrTimeout:  &hour,
		MountOptions: fuse.MountOptions{FsName: "benchsmall", DirectMountStrict: true, DisableXAttrs: true},
	})
}

// refServerEnv, set, makes this test binary serve one reference
// filesystem instead of running tests (TestMain, serveRef): "open MNT" or
// "noopen MNT" (a smallFile holding the bytes in smallDataEnv), or
// "loop MNT DIR" (a loopback of DIR whose reads and writes go through the
// server, mountLoopback's), "loopkc MNT DIR" (the same with
// FOPEN_KEEP_CACHE) or "looppt MNT DIR" (go-fuse's default: passthrough).
const (
	refServerEnv = "CTXFS_BENCH_REFSERVER"
	smallDataEnv = "CTXFS_BENCH_SMALLDATA"
)

// spawnRef mounts a reference filesystem (refServerEnv's spec, on a new
// mount point; env is added to the process's environment) from a process of its own (this test binary again), as
// ctxfs serves from its own process, and returns its mount point; the
// process is stopped and the mount gone at cleanup. A FUSE round trip to
// another process costs more here than one served by the caller's own
// process: `cat` of a file that answers OPEN made 0.19-0.26 of native
// from a process of its own and 0.30-0.37 when the benchmark's process
// served it, in the same six runs (kernel 6.18 in a VM, 2 cores).
func spawnRef(b *testing.B, env []string, mode string, args ...string) string {
	b.Helper()
	mnt := b.TempDir()
	self, err := os.Executable()
	testkit.Must(b, err)
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, refServerEnv+"="+strings.Join(append([]string{mode, mnt}, args...), " "))
	out, err := cmd.StdoutPipe()
	testkit.Must(b, err)
	cmd.Stderr = os.Stderr
	testkit.Must(b, cmd.Start())
	b.Cleanup(func() {
		stopProcess(cmd, syscall.SIGTERM)
		unix.Unmount(mnt, unix.MNT_DETACH) // if it died without unmounting
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("%q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			b.Fatalf("reference server: %v", err)
		}
	case <-time.After(20 * time.Second):
		b.Fatal("reference server did not start")
	}
	return mnt
}

// spawnSmallFile is spawnRef of a smallFile holding data: its path.
func spawnSmallFile(b *testing.B, data []byte, noOpen bool) string {
	mode := "open"
	if noOpen {
		mode = "noopen"
	}
	return filepath.Join(spawnRef(b, []string{smallDataEnv + "=" + string(data)}, mode), "state")
}

// serveRef is the process spawnRef starts: it mounts what spec names,
// says "ready" on stdout and serves until SIGTERM.
func serveRef(spec string) int {
	f := strings.Fields(spec)
	var srv *fuse.Server
	var err error
	switch {
	case len(f) == 2 && (f[0] == "open" || f[0] == "noopen"):
		srv, err = mountSmall(f[1], []byte(os.Getenv(smallDataEnv)), f[0] == "noopen")
	case len(f) == 3 && (f[0] == "loop" || f[0] == "loopkc" || f[0] == "looppt"):
		srv, err = newLoopback(f[2], f[1], f[0] == "looppt", f[0] == "loopkc")
	default:
		err = fmt.Errorf("bad spec %q", spec)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reference server:", err)
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("ready")
	<-stop
	if err := srv.Unmount(); err != nil {
		unix.Unmount(f[1], unix.MNT_DETACH)
	}
	return 0
}

// BenchmarkLsSessions: `ls -l` of a session/ directory holding 10,000
// sessions (and index/), through the mount against the store directory.
//
//	readdir-lstat: os.ReadDir, then os.Lstat of every entry, in this process
//	exec-ls:       the real `ls -l` (coreutils), output discarded
//
// The sessions are real: one is made through the mount (mkdir), the others
// are copies of it made in the store while the server is stopped (mkdir
// through the mount costs ~25-40 ms a session here, see docs/benchmarks.md).
// The kernel keeps the listing, the names and the attributes of a session
// container (session.Promises.CacheListing), so the iterations after the first are
// served from its caches, as ext4's are from its own.
func BenchmarkLsSessions(b *testing.B) {
	const n = 10000
	s := benchFuseServer(b)
	copySessions(b, s, n)
	mnt, native := benchMnt(s), benchStore(s)
	lsLong := func(dir string) (int64, error) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return 0, err
		}
		for _, e := range ents {
			if _, err := os.Lstat(filepath.Join(dir, e.Name())); err != nil {
				return 0, err
			}
		}
		return int64(len(ents)), nil
	}
	lsExec := func(dir string) (int64, error) {
		cmd := exec.Command("ls", "-l", dir)
		cmd.Stdout = io.Discard
		return 0, cmd.Run()
	}
	for _, want := range []string{mnt, native} {
		if got, err := lsLong(want); err != nil || got != n+1 {
			b.Fatalf("%s: %d entries (want %d sessions + index): %v", want, got, n, err)
		}
	}
	for _, c := range []struct {
		name string
		ls   func(string) (int64, error)
	}{{"readdir-lstat", lsLong}, {"exec-ls", lsExec}} {
		b.Run(c.name, func(b *testing.B) {
			sides := []*side{{name: "ctxfs"}, {name: "native"}}
			dirs := []string{mnt, native}
			b.ResetTimer()
			interleave(b, sides, func(j int) (int64, error) { return c.ls(dirs[j]) })
			b.StopTimer()
			reportOps(b, sides[0], sides[1])
		})
	}
}

// copySessions gives root's coder agent n real sessions ("warm" and
// "tmpl" included): it makes "tmpl" through the mount, stops the server,
// copies tmpl (every file, seals included) to old-1 … old-(n-2) in the
// store, each with its own
// updated_at mtime (the index orders sessions by it at load), and starts
// the server again.
func copySessions(b *testing.B, s *server, n int) {
	b.Helper()
	benchNewSession(b, s, "tmpl")
	s.kill(s.cmd, syscall.SIGTERM)
	tmpl := benchStore(s, "tmpl")
	var ents []sessFile
	testkit.Must(b, filepath.WalkDir(tmpl, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == tmpl {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tmpl, p)
		e := sessFile{rel: rel, mode: info.Mode()}
		if d.Type().IsRegular() {
			if e.data, err = os.ReadFile(p); err != nil {
				return err
			}
		} else if !d.IsDir() {
			return fmt.Errorf("%s: not a file or directory", p)
		}
		ents = append(ents, e)
		return nil
	}))
	t0 := time.Now()
	base := time.Now().Add(-time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, runtime.NumCPU())
	workers := 2 * runtime.NumCPU()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 1 + w; i < n-1; i += workers {
				if err := copyOne(benchStore(s, "old-"+strconv.Itoa(i)), ents, base.Add(time.Duration(i)*time.Millisecond)); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("copied %d sessions in %v", n-2, time.Since(t0).Round(time.Millisecond))
	s.start()
}

// sessFile is one file or directory of a template session.
type sessFile struct {
	rel  string
	mode os.FileMode
	data []byte
}

// copyOne makes dir a copy of a template session, with updated_at
// stamped mtime.
func copyOne(dir string, ents []sessFile, mtime time.Time) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.rel)
		if e.mode.IsDir() {
			if err := os.Mkdir(p, e.mode.Perm()); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, e.data, e.mode.Perm()); err != nil {
			return err
		}
	}
	u := filepath.Join(dir, "updated_at")
	if err := os.WriteFile(u, []byte(strconv.FormatInt(mtime.Unix(), 10)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Chtimes(u, mtime, mtime)
}
