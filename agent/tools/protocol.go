package tools

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// The protocol between the server and the tool process, one JSON line at
// a time: the server writes a Request on the process's stdin; a change
// (fs.write, fs.replace, fs.remove) answers first with a Reply holding
// Before, and waits for a Go line: only {"go":true} lets it change the
// file, anything else (or EOF) leaves it as it was; every call ends with
// a Reply holding Result or Error, and the process waits for the next
// Request (one process serves a run's calls in turn).

// Request is one call, its arguments already checked by Parse.
type Request struct {
	Name string `json:"name"`
	Args *Args  `json:"args"`
	// Nproc is the RLIMIT_NPROC shell.exec runs under (0: none): set by
	// the server, which sees every task of the uid.
	Nproc uint64 `json:"nproc,omitempty"`
	// Exact is set by the server for a restore's calls: the path is a
	// version's, the directory as the kernel reached it when it was kept
	// (no symlink in it), and the restore runs as whoever asked for it,
	// so a directory swapped for a symlink since is ELOOP, never followed
	// (in a shared session, into the restorer's own files).
	Exact bool `json:"exact,omitempty"`
}

// Before is a file as a change found it: the path resolved to an
// absolute one (inside the jail, for a jailed call), and its content, or
// its absence.
type Before struct {
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
	Content []byte `json:"content,omitempty"`
}

// Go is the server's answer to a Before.
type Go struct {
	Go bool `json:"go"`
}

// Reply is what the tool process writes.
type Reply struct {
	Before *Before         `json:"before,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Failure        `json:"error,omitempty"`
}

// Failure is a call that failed: its errno's name, and words for the
// model.
type Failure struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

// Err turns a Failure back into an error carrying its errno.
func (f *Failure) Err() error {
	errno, ok := abi.ErrnoFromName(f.Code)
	if !ok {
		errno = syscall.EIO
	}
	return abi.Errorf(errno, "", "%s", f.Message)
}

// failure is err as a Failure: its errno (EIO when it carries none) and
// its words.
func failure(err error) *Failure {
	var e *abi.Error
	if errors.As(err, &e) {
		return &Failure{abi.ErrnoName(e.Errno), e.Msg}
	}
	return &Failure{abi.ErrnoName(abi.Errno(err)), err.Error()}
}

// MaxLine bounds one protocol line either way: every byte string goes in
// base64, so a Before of MaxBefore bytes, a request's content of as many,
// or fs.replace's old and new of MaxWrite each, with room for the rest.
const MaxLine = 2*(MaxBefore/3*4+4) + 64<<10

// ReadLine reads one protocol line into v; a line over MaxLine is EFBIG.
func ReadLine(r *bufio.Reader, v any) error {
	line, err := readRawLine(r)
	if err != nil {
		return err
	}
	return decodeLine(line, v)
}

// readRawLine reads one protocol line (its newline not counted against
// MaxLine); io.EOF at the end of r before one begins.
func readRawLine(r *bufio.Reader) ([]byte, error) {
	line, err := proto.ReadLineWithin(r, MaxLine)
	switch {
	case err == nil:
		return line, nil
	case errors.Is(err, proto.ErrLineTooLong):
		return nil, abi.Errorf(syscall.EFBIG, "", "a protocol line is over %d bytes", MaxLine)
	case err == io.EOF && len(line) == 0:
		return nil, io.EOF
	default:
		return nil, fmt.Errorf("reading a protocol line: %w", err)
	}
}

func decodeLine(line []byte, v any) error {
	if err := json.Unmarshal(line, v); err != nil {
		return abi.Errorf(syscall.EPROTO, "", "a protocol line is not JSON: %v", err)
	}
	return nil
}

// WriteLine writes v as one protocol line.
func WriteLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
