package sealedlog

import (
	"errors"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
)

// fdatasync makes f's data (and the metadata needed to read it back, such
// as its size) durable. It is the only durability primitive for data; the
// callers say which write it makes durable.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// osError turns an OS error into the *abi.Error callers get, keeping the
// errno the kernel gave (ENOSPC, EACCES, ...) and the operation and path.
func osError(op, path string, err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return err
	}
	return &abi.Error{Op: op, Path: path, Errno: abi.Errno(err), Msg: storefs.Words(err)}
}

// unprovable is the EIO error of a log whose history cannot be proven.
func unprovable(path, what string) *abi.Error {
	return &abi.Error{Op: "check", Path: path, Errno: syscall.EIO, Msg: path[strings.LastIndexByte(path, '/')+1:] + ": " + what}
}
