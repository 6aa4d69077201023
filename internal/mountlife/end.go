package mountlife

import (
	"errors"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// End is a server's own clean unmount of c: it unmounts c in this mount
// namespace (lazily when busy), then ends the connection, as the server's
// exit would. Unless c is still the topmost mount at its directory, it
// touches nothing: the path names someone else's mount then.
//
// The connection must be ended, not only unmounted here: every mount
// namespace made while the server served holds a copy of its mounts (a
// systemd service's private /tmp, `ip netns exec`, `unshare -m`, a
// container), and the kernel keeps the connection while any copy lives.
// A server that waited for its requests to end after the unmount then
// waited as long as that namespace lived, and `ctxfs umount` gave up on
// it after 10 s (its kill skipped the store's clean close).
//
// The connection is ended through its fusectl abort file (the
// connection's owner may write it: root, or the user whose server it is),
// opened while c is on top at its directory and checked to be still so
// after the open: the kernel gives a device number to a later mount only
// once the last mount of it is gone, so the file opened names this
// connection, and an open fusectl file never reaches another (the kernel
// unhooks it when the connection goes). Where fusectl is not mounted, a
// root server mounts it where only it sees it (openAbort); a user's
// connections then end at its exit.
func (c Conn) End() {
	if !c.OnTop() {
		return
	}
	abort := c.openAbort()
	if abort != nil && !c.OnTop() {
		abort.Close() // it went meanwhile: the name may be another's now
		abort = nil
	}
	unmountHere(c.Dir)
	if abort != nil {
		abort.Write([]byte("1\n"))
		abort.Close()
	}
}

// unmountHere unmounts the FUSE mount at dir from this mount namespace,
// lazily when it is busy (a tail -f, a shell in it; left in place, it
// would be a dead mount once the connection ends): umount2 as root,
// fusermount3 for a user.
func unmountHere(dir string) {
	if os.Geteuid() == 0 {
		if unix.Unmount(dir, 0) != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
		return
	}
	if exec.Command(fusermount, "-u", "-q", dir).Run() != nil {
		exec.Command(fusermount, "-u", "-q", "-z", dir).Run()
	}
}

// openAbort opens the fusectl abort file of c's device, nil when there is
// none. Where fusectl is not mounted, a root server mounts it in a mount
// namespace of one thread's own (openAbortPrivately): a clean stop
// changes nothing on the machine but its own mounts. A user's server has
// no way to mount it; its connections then end at its exit.
func (c Conn) openAbort() *os.File {
	name := connControl(c.Dev) + "/abort"
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) && os.Geteuid() == 0 {
		f, err = openAbortPrivately(name)
	}
	if err != nil {
		return nil
	}
	return f
}

// openAbortPrivately opens the fusectl file name through a fusectl of its
// own: a thread unshares its mount namespace, makes every mount in it
// private (a shared /sys would carry the new mount back to everyone's),
// mounts fusectl there and opens the file. The open file works from any
// thread and keeps its mount alive after the namespace has gone. The
// thread never returns to the runtime: locked and left, it ends, and its
// namespace with it (its copy of the server's mounts is the server's own,
// whose connection the caller is about to end).
func openAbortPrivately(name string) (*os.File, error) {
	done := make(chan opened, 1)
	go openInOwnNamespace(name, done)
	o := <-done
	return o.f, o.err
}

// opened is what openInOwnNamespace opened.
type opened struct {
	f   *os.File
	err error
}

// openInOwnNamespace is openAbortPrivately's thread. On the process's main
// thread it does nothing itself: /proc/self shows the main thread's mounts
// (mountinfo, which every check of a mount reads), and the runtime never
// ends that thread. It holds it instead, so that the work it hands on
// runs on another thread.
func openInOwnNamespace(name string, done chan<- opened) {
	runtime.LockOSThread() // never unlocked but on the main thread: the thread leaves with its namespace
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan opened, 1)
		go openInOwnNamespace(name, inner)
		done <- <-inner
		runtime.UnlockOSThread()
		return
	}
	var o opened
	o.err = unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS)
	if o.err == nil {
		o.err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
	}
	if o.err == nil {
		o.err = unix.Mount("fusectl", fusectl, "fusectl", 0, "")
	}
	if o.err == nil {
		o.f, o.err = os.OpenFile(name, os.O_WRONLY, 0)
	}
	done <- o
}
