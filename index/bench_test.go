package index

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// BenchmarkTouch compares a Touch in a container of 10 sessions with one in
// a container of 100,000: the ns/op of each pair should be about equal.
// "send" writes by-cwd and current (two fsynced renames, as the session and
// the cwd change every op); "append" moves the list only.
func BenchmarkTouch(b *testing.B) {
	for _, n := range []int{10, 100_000} {
		dir := benchContainer(b, n)
		x, err := loadAs(b, dir, os.Getuid(), os.Getgid())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { x.Close() })
		settle(b, x)
		for _, mode := range []string{"send", "append"} {
			b.Run(fmt.Sprintf("%s/%d", mode, n), func(b *testing.B) {
				benchTouch(b, x, n, mode == "send")
			})
		}
	}
}

func benchTouch(b *testing.B, x *Index, n int, send bool) {
	cwds := []string{"/w0", "/w1", "/w2", "/w3"}
	i := 0
	for b.Loop() {
		// Step by a prime so the session moved is rarely the one on top.
		name := "s" + strconv.Itoa(i*7919%n)
		cwd := ""
		if send {
			cwd = cwds[i%len(cwds)]
		}
		if err := x.Touch(name, cwd); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// settle waits for the snapshot Load schedules and flushes the page cache,
// so the first timed fsync does not pay for the setup's journal (on ext4 the
// first op of send/100000 otherwise takes a second and ends the benchmark).
func settle(b *testing.B, x *Index) {
	p := filepath.Join(x.idx, listFile)
	want := x.ListBytes()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if got, _ := os.ReadFile(p); bytes.Equal(got, want) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Sync()
}

// benchContainer makes n session directories with updated_at files (no
// fsync, distinct names; mtimes are whatever the clock gives), four workers
// at a time. It lives in b.TempDir, so TMPDIR=/dev/shm makes setup and
// cleanup of the 100,000 quick on a slow disk.
func benchContainer(b *testing.B, n int) string {
	dir := b.TempDir()
	const workers = 4
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			var err error
			for i := w; i < n && err == nil; i += workers {
				p := filepath.Join(dir, "s"+strconv.Itoa(i))
				if err = os.Mkdir(p, 0o700); err == nil {
					err = os.WriteFile(filepath.Join(p, abi.FileUpdatedAt), []byte("1700000000\n"), 0o600)
				}
			}
			errs <- err
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkLoad loads a container of 100,000 sessions: "mtimes" with no
// snapshot (the order comes from the updated_at mtimes alone), "snapshot"
// with the exact one a clean Close left (read, checked, nothing written).
// Both stat each updated_at once; the snapshot adds one read of index/list.
func BenchmarkLoad(b *testing.B) {
	const n = 100_000
	dir := benchContainer(b, n)
	r, err := storefs.Open(filepath.Dir(dir))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	own := storefs.Owner{Uid: os.Getuid(), Gid: os.Getgid(), DirMode: 0o700, FileMode: 0o600}
	list := filepath.Join(dir, dirName, listFile)
	load := func(b *testing.B) {
		x, err := Load(r, filepath.Base(dir), own)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := x.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.Run("mtimes/100000", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			if err := os.Remove(list); err != nil && !os.IsNotExist(err) {
				b.Fatal(err)
			}
			b.StartTimer()
			load(b)
		}
	})
	b.Run("snapshot/100000", func(b *testing.B) {
		for b.Loop() {
			load(b)
		}
	})
}
