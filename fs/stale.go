package fs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// fusectl is where the kernel's FUSE control filesystem is mounted.
const fusectl = "/sys/fs/fuse/connections"

// staleProbe is how long a mount may take to answer a stat before it
// counts as dead.
const staleProbe = time.Second

// CleanStale makes dir usable again when a FUSE mount is left there: a
// mount that answers is detached; one that does not (ENOTCONN, an error,
// or no answer within a second to an open of its root) has its connection aborted through
// fusectl first, then is detached.
//
// The abort matters after a SIGKILL: a server thread that was sending the
// kernel an invalidation (NotifyContent) may wait, uninterruptibly, for a
// page that a reader's pending READ holds locked. That thread cannot die,
// so the server's /dev/fuse descriptor is never closed, the connection is
// never ended, and every process that touches the old mount (a `tail -f`,
// its exit) hangs in D state for ever. Aborting the connection fails the
// pending requests, which frees them all. A plain detach would leave them
// hanging.
func CleanStale(dir string) {
	dir = filepath.Clean(dir)
	for {
		dev, ok := fuseMountAt(dir)
		if !ok {
			return
		}
		if !answers(dir) {
			abortConn(dev)
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return
		}
	}
}

// IsFUSEMount reports whether a FUSE filesystem is mounted at dir.
func IsFUSEMount(dir string) bool {
	_, ok := fuseMountAt(filepath.Clean(dir))
	return ok
}

// AbortDead aborts the connection of a FUSE mount at dir that does not
// answer, and leaves the mount itself in place. It is safe to call before
// knowing whether dir is ours to replace: a live mount is left alone.
// A server killed in the middle of an invalidation holds everything it
// had open (its store lock too) until its connection is aborted.
func AbortDead(dir string) {
	if dev, ok := fuseMountAt(filepath.Clean(dir)); ok && !answers(dir) {
		abortConn(dev)
	}
}

// answers reports whether the server behind dir answers within
// staleProbe. It opens the directory: the kernel always asks the server
// for that (a stat could be answered from its attribute cache). A probe
// left waiting on a dead mount returns once the connection is aborted.
func answers(dir string) bool {
	done := make(chan error, 1)
	go func() {
		f, err := os.Open(dir)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err == nil
	case <-time.After(staleProbe):
		return false
	}
}

// abortConn ends the FUSE connection whose device is dev (fusectl names
// connections by the kernel's dev_t: major<<20 | minor).
func abortConn(dev [2]uint64) {
	name := filepath.Join(fusectl, strconv.FormatUint(dev[0]<<20|dev[1], 10))
	if _, err := os.Stat(name); errors.Is(err, os.ErrNotExist) {
		unix.Mount("fusectl", fusectl, "fusectl", 0, "")
	}
	os.WriteFile(filepath.Join(name, "abort"), []byte("1\n"), 0)
}

// fuseMountAt finds the topmost FUSE mount at dir in /proc/self/mountinfo
// and returns its device (major, minor).
func fuseMountAt(dir string) (dev [2]uint64, ok bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return dev, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, fl := range fields {
			if fl == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) || unescapeMount(fields[4]) != dir {
			continue
		}
		if fstype := fields[sep+1]; fstype != "fuse" && !strings.HasPrefix(fstype, "fuse.") {
			continue
		}
		var ma, mi uint64
		if _, err := fmt.Sscanf(fields[2], "%d:%d", &ma, &mi); err == nil {
			dev, ok = [2]uint64{ma, mi}, true // the last one listed is on top
		}
	}
	return dev, ok
}

// unescapeMount undoes the octal escapes of mountinfo (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
