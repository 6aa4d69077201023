// Package logx builds the server's logger (log/slog) from its three
// flags: the level, the format (text for people, json for journald and log
// collectors) and the file, and the Queue through which the server writes
// its stderr, so that a reader that stalls never stalls the server. It
// decides nothing about what is logged; the callers do, and they never log
// a secret nor the content of a message.
package logx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Levels and Formats are the values the flags take, in the order help
// and completion list them.
var (
	Levels  = []string{"debug", "info", "warn", "error"}
	Formats = []string{"text", "json"}
)

// Options are the logging flags; "" takes the default.
type Options struct {
	Level  string // one of Levels; default info
	Format string // one of Formats; default text
	File   string // a file to append to; default the writer given to New
}

// Check refuses a level or a format that is not one of the known values,
// so that a mistyped flag is a usage error before anything starts.
func (o Options) Check() error {
	if _, err := parseLevel(o.Level); err != nil {
		return err
	}
	if o.Format != "" && !oneOf(o.Format, Formats) {
		return fmt.Errorf("--log-format %q: want %s", o.Format, strings.Join(Formats, " or "))
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if !oneOf(s, Levels) || l.UnmarshalText([]byte(s)) != nil {
		return 0, fmt.Errorf("--log-level %q: want one of %s", s, strings.Join(Levels, ", "))
	}
	return l, nil
}

func oneOf(s string, set []string) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}

// New returns the logger the options describe, writing to o.File when
// one is named (through a Queue of its own: a file on a stalled disk must
// not stall the server either) and to w otherwise, and what to close at
// exit (nil for w): the file's queue, written out, then the file.
func New(o Options, w io.Writer) (*slog.Logger, io.Closer, error) {
	if err := o.Check(); err != nil {
		return nil, nil, err
	}
	level, _ := parseLevel(o.Level)
	var closer io.Closer
	if o.File != "" {
		f, err := OpenFile(o.File)
		if err != nil {
			return nil, nil, err
		}
		q := NonBlocking(f)
		w, closer = q, queuedFile{q, f}
	}
	h := &slog.HandlerOptions{Level: level}
	if o.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, h)), closer, nil
	}
	return slog.New(slog.NewTextHandler(w, h)), closer, nil
}

// OpenFile opens a log file for appending, creating it 0600. The server
// runs as root and the path may lie in a directory other users can write
// (/tmp): so a symlink there is never followed (O_NOFOLLOW), a FIFO never
// blocks the start (O_NONBLOCK), and only a regular file (or a character
// device, such as /dev/null) that belongs to this process's user is
// appended to, never another user's file.
func OpenFile(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		switch err {
		case unix.ELOOP:
			return nil, fmt.Errorf("log file %s: a symbolic link; name the file itself", path)
		case unix.ENXIO: // a FIFO without a reader, or a socket
			return nil, fmt.Errorf("log file %s: not a regular file", path)
		}
		return nil, &os.PathError{Op: "open log file", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat log file", Path: path, Err: err}
	}
	switch kind := st.Mode & unix.S_IFMT; {
	case kind != unix.S_IFREG && kind != unix.S_IFCHR:
		unix.Close(fd)
		return nil, fmt.Errorf("log file %s: not a regular file", path)
	case kind == unix.S_IFREG && int(st.Uid) != os.Geteuid():
		unix.Close(fd)
		return nil, fmt.Errorf("log file %s belongs to uid %d, not to this server (uid %d): remove it or name another file", path, st.Uid, os.Geteuid())
	}
	return os.NewFile(uintptr(fd), path), nil
}

// queuedFile closes a log file's queue, then the file.
type queuedFile struct {
	q *Queue
	f *os.File
}

func (c queuedFile) Close() error {
	c.q.Close()
	return c.f.Close()
}

// Line logs msg at level with args as l.Log does, without the caller's
// program counter, which slog takes at every line (runtime.Callers: a
// fifth of a line's CPU) and the server's handlers never print (New sets
// no AddSource). For the lines a busy server logs at every run.
func Line(l *slog.Logger, level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.Add(args...)
	l.Handler().Handle(ctx, r)
}
