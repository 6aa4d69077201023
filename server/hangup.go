package server

import (
	"context"
	"net"

	"golang.org/x/sys/unix"
)

// hangUp is a context done once the client has closed its end of conn, so
// that a reply which works long before it writes (a search scanning a large
// session) stops at once rather than at its next write (issue 19, finding
// 9). A half-close is not a hang-up: a client that shut down its writing
// still reads the reply. Bytes the client sends after its request are
// read and dropped. The watch ends when conn is closed (or ctx cancelled
// and conn closed: serveConn's defers).
func hangUp(conn *net.UnixConn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	raw, err := conn.SyscallConn()
	if err != nil {
		return ctx, cancel
	}
	go raw.Read(func(fd uintptr) bool {
		if peerGone(int(fd)) {
			cancel()
			return true
		}
		return false // wait for the next event on conn
	})
	return ctx, cancel
}

// watchHangUp is hangUp for any connection: a Unix socket's is seen
// without reading it (a half-close is no hang-up); another's (a peer
// host's TLS connection, ServeRemote) by a goroutine that reads and drops
// what comes until the read fails: there the end is the hang-up.
func watchHangUp(conn net.Conn) (context.Context, context.CancelFunc) {
	if uc, ok := conn.(*net.UnixConn); ok {
		return hangUp(uc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		var buf [512]byte
		for {
			if _, err := conn.Read(buf[:]); err != nil {
				return
			}
		}
	}()
	return ctx, cancel
}

// peerGone drains what can be read from the socket fd without waiting, and
// reports whether the peer closed it (POLLHUP: both directions shut).
func peerGone(fd int) bool {
	var buf [512]byte
	for {
		n, _, err := unix.Recvfrom(fd, buf[:], unix.MSG_DONTWAIT)
		if n <= 0 || err != nil {
			break
		}
	}
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	return err == nil && n > 0 && p[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0
}
