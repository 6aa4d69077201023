package abi

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// Error is an engine error that carries the errno every transport reports:
// the FUSE layer returns it, the socket and the control file put its name in
// an error frame, and ctx prints it. Op and Path say what failed, as in
// *fs.PathError.
type Error struct {
	Op    string
	Path  string
	Errno syscall.Errno
	Msg   string
}

func (e *Error) Error() string {
	s := e.Op
	if e.Path != "" {
		s += " " + e.Path
	}
	if s != "" {
		s += ": "
	}
	s += ErrnoName(e.Errno)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Unwrap lets errors.Is(err, syscall.EINVAL) and errors.Is(err, fs.ErrNotExist) work.
func (e *Error) Unwrap() error { return e.Errno }

// Wrap is err as an *Error: err itself when it is one (or wraps one),
// else an *Error of op that keeps err's errno and words (a host
// filesystem's error, say).
func Wrap(op string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Op: op, Errno: Errno(err), Msg: err.Error()}
}

// Message is err's own words: an *Error's Msg without its op and path
// (for quoting it inside another error), else err's text.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Msg != "" {
		return e.Msg
	}
	return err.Error()
}

// Errorf builds an *Error with a formatted message.
func Errorf(errno syscall.Errno, op, format string, args ...any) *Error {
	return &Error{Op: op, Errno: errno, Msg: fmt.Sprintf(format, args...)}
}

// Errno maps any error to the errno reported for it. Errors that carry no
// errno (a bug, or an unexpected library error) are EIO: the caller learns
// that something failed without being told a wrong reason.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Errno
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	var carrier interface{ Errno() syscall.Errno } // a refusal a server sent
	if errors.As(err, &carrier) {
		return carrier.Errno()
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, fs.ErrPermission):
		return syscall.EACCES
	}
	return syscall.EIO
}

// errnoNames lists the errnos the ABI speaks of, by their C names.
var errnoNames = map[syscall.Errno]string{
	syscall.EPERM:        "EPERM",
	syscall.ENOENT:       "ENOENT",
	syscall.EINTR:        "EINTR",
	syscall.EIO:          "EIO",
	syscall.EACCES:       "EACCES",
	syscall.EBUSY:        "EBUSY",
	syscall.EEXIST:       "EEXIST",
	syscall.EXDEV:        "EXDEV",
	syscall.ENOTDIR:      "ENOTDIR",
	syscall.EISDIR:       "EISDIR",
	syscall.EINVAL:       "EINVAL",
	syscall.ENOSPC:       "ENOSPC",
	syscall.EMSGSIZE:     "EMSGSIZE",
	syscall.ENOTEMPTY:    "ENOTEMPTY",
	syscall.ECONNREFUSED: "ECONNREFUSED",
	syscall.ENAMETOOLONG: "ENAMETOOLONG",
	syscall.ECANCELED:    "ECANCELED",
	syscall.ETIMEDOUT:    "ETIMEDOUT",
	syscall.ENOSYS:       "ENOSYS",
	syscall.ENOTSUP:      "ENOTSUP",
	syscall.EROFS:        "EROFS",
	syscall.ELOOP:        "ELOOP",
	syscall.EAGAIN:       "EAGAIN",
	syscall.EMFILE:       "EMFILE",
	syscall.ENFILE:       "ENFILE",
	syscall.EFBIG:        "EFBIG",
}

// ErrnoName is the C name of an errno ("EINVAL"): the ABI's own names
// first, then the kernel's (EMFILE, ENFILE, …); "EIO" for a number neither
// knows, so that a client always gets a name it can act on.
func ErrnoName(e syscall.Errno) string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return errnoNames[syscall.EIO]
}

// ErrnoFromName is the inverse of ErrnoName; ok is false for an unknown name.
func ErrnoFromName(name string) (syscall.Errno, bool) {
	for e, n := range errnoNames {
		if n == name {
			return e, true
		}
	}
	for e := syscall.Errno(1); e < 4096; e++ { // the kernel's names, as ErrnoName gives them
		if unix.ErrnoName(e) == name {
			return e, true
		}
	}
	return 0, false
}
