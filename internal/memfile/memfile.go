// Package memfile makes the memory files the server hands to the
// processes it starts (a run's input, its environment): read from their
// start, never a path anyone could reach or replace.
package memfile

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// New is a close-on-exec memory file holding data, positioned at its
// start: the reader gets it all and then EOF, and the writer needs no
// goroutine that could block on a reader that never reads.
func New(name, data string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, abi.Errorf(abi.Errno(err), "run", "memfd_create: %v", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return nil, abi.Wrap("run", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, abi.Wrap("run", err)
	}
	return f, nil
}
