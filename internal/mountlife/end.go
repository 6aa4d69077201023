package mountlife

import (
	"os"
	"os/exec"

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
// unhooks it when the connection goes). Without fusectl mounted the
// connection ends at the process's exit.
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
// none. fusectl is not mounted for it (systemd mounts it at boot): a clean
// stop changes nothing on the machine but its own mounts.
func (c Conn) openAbort() *os.File {
	f, err := os.OpenFile(connControl(c.Dev)+"/abort", os.O_WRONLY, 0)
	if err != nil {
		return nil
	}
	return f
}
