package storefs

import (
	"fmt"
	"io/fs"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The write gate: whether this host may still change the store. In a
// cluster (SPEC 19) one host writes a store at a time, under a lease; a
// host that may have lost its lease must change nothing more, so every
// change a Root makes (create, open for writing, mkdir, rename, move,
// swap, link, symlink, mknod, unlink, rmdir, chmod, chown, utimes, and so
// every replace) asks the gate first and is refused with the gate's error,
// changing nothing. Reads, stats and directory syncs are not asked. The
// gate is shared by every Root derived from the one it was set on (ShowAs,
// As): they are one store. Files already open are the caller's to stop
// (the journal asks the gate before each batch: sealedlog).
//
// The store's probe of its filesystem's ways (ways.go), a scratch
// directory made and removed once, is not asked: it holds nothing, and a
// gate closing during it must not leave it behind.
type gate struct{ fn atomic.Pointer[func() error] }

// SetGate makes fn the gate of r and of every Root derived from it (nil:
// always open). fn must be cheap: it is asked at every change.
func (r *Root) SetGate(fn func() error) {
	if fn == nil {
		r.gate.fn.Store(nil)
		return
	}
	r.gate.fn.Store(&fn)
}

// ShutGate closes the gate of r and of every Root derived from it for
// good, whatever its function would say: every later change is refused
// with an error wrapping EAGAIN (a writer host that lost its lease, once
// it has given the store up).
func (r *Root) ShutGate() {
	r.SetGate(func() error { return errShut })
}

var errShut = fmt.Errorf("this host gave the store up: %w", syscall.EAGAIN)

// gated is nil when the gate is open (one atomic load when none is set),
// else the gate's error for op on rel.
func (r *Root) gated(op, rel string) error {
	if r.gate == nil {
		return nil
	}
	fn := r.gate.fn.Load()
	if fn == nil {
		return nil
	}
	if err := (*fn)(); err != nil {
		return &fs.PathError{Op: op, Path: r.Show(rel), Err: err}
	}
	return nil
}

// ungated is a copy of r that no gate stops: for the probe alone.
func (r *Root) ungated() *Root {
	c := *r
	c.gate = nil
	return &c
}

// writes says whether open flags may change the file.
func writes(flags int) bool {
	return flags&(unix.O_WRONLY|unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_APPEND) != 0
}
