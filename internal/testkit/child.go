package testkit

import "syscall"

// ChildAttr puts a child in a process group of its own (killed as a
// group) and has the kernel SIGKILL it when the test binary dies: a binary
// that go test's -timeout panics, or that CI kills, runs no t.Cleanup, and
// a child left behind runs on (an etcd, an aimock, a listener in a test
// network, a client stuck on a dead mount). The signal is tied to the
// thread that forked the child, which the Go runtime keeps unless a
// goroutine exits locked to it.
func ChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
