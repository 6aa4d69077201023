package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// Command is the hidden command of the ctxfs binary that is the tool
// process: `ctxfs __tool`, started as the session's uid through the enter
// or the jail trampoline, speaking the protocol on stdin and stdout.
const Command = "__tool"

// Main is `ctxfs __tool`: it serves the calls of one run, one at a time,
// each carried out as the uid it runs as, in its working directory (the
// run's cwd, inside the jail for a jailed run): it reads a Request and
// writes its Reply, until its stdin ends (the run is over, or the server
// is gone) or it is asked to stop (SIGTERM, SIGINT, SIGHUP: a call in
// flight ends first, its command killed). It returns 0 then, 1 when a
// Reply could not be written.
//
// It is a child subreaper, so that every process a shell.exec leaves,
// even one that left the process group or the session, is its descendant
// and is killed and reaped before the call's Reply (killDescendants):
// between calls it has no child at all.
func Main(args []string) int {
	if len(args) != 0 {
		err := abi.Errorf(syscall.EINVAL, Command, "usage: ctxfs %s, with requests on stdin", Command)
		WriteLine(os.Stdout, Reply{Error: failure(err)})
		return 1
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		WriteLine(os.Stdout, Reply{Error: failure(abi.Errorf(abi.Errno(err), Command, "PR_SET_CHILD_SUBREAPER: %v", err))})
		return 1
	}
	c := newConn(os.Stdin, os.Stdout)
	for {
		var req Request
		err := c.next(&req)
		if err == io.EOF {
			return 0
		}
		if err == nil && req.Args == nil {
			err = abi.Errorf(syscall.EINVAL, Command, "a request without arguments")
		}
		reply := Reply{}
		var result any
		if err == nil {
			result, err = c.call(&req)
		}
		if err != nil {
			reply.Error = failure(err)
		} else if reply.Result, err = json.Marshal(result); err != nil {
			reply.Result, reply.Error = nil, failure(err)
		}
		if WriteLine(c.out, reply) != nil {
			return 1
		}
		if c.stopped() {
			return 0
		}
	}
}

// conn is the tool process's side of the protocol.
type conn struct {
	lines  chan []byte   // the server's lines, in order, read ahead by one
	hangup chan struct{} // closed when the server's side ends (EOF, or a line too long)
	stop   chan struct{} // closed when the process is asked to stop
	out    io.Writer
}

// newConn starts reading in and watching for the signals that stop the
// process.
func newConn(in io.Reader, out io.Writer) *conn {
	c := &conn{lines: make(chan []byte), hangup: make(chan struct{}), stop: make(chan struct{}), out: out}
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, err := readRawLine(r)
			if err != nil {
				close(c.hangup)
				return
			}
			c.lines <- line
		}
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		<-sigs
		close(c.stop)
	}()
	return c
}

// next reads the server's next line into v; io.EOF when the server is gone
// or the process is asked to stop.
func (c *conn) next(v any) error {
	select {
	case line := <-c.lines:
		return decodeLine(line, v)
	case <-c.hangup:
	case <-c.stop:
	}
	return io.EOF
}

func (c *conn) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// ended is a context that ends when the server goes or the process is
// asked to stop: what stops a running command.
func (c *conn) ended() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.hangup:
		case <-c.stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// call carries out req; a change asks the server before it changes
// anything.
func (c *conn) call(req *Request) (any, error) {
	a := req.Args
	switch req.Name {
	case FSRead:
		return readFile(a)
	case FSList:
		return listDir(a)
	case FSStat:
		return statPath(a)
	case FSWrite, FSReplace, FSRemove:
		return change(req.Name, a, req.Exact, c.confirm)
	case FSKeep:
		return keepOnly(a, c.confirm)
	case ShellExec:
		ctx, cancel := c.ended()
		defer cancel()
		return shell(ctx, a, req.Nproc)
	}
	return nil, abi.Errorf(syscall.EINVAL, req.Name, "the tool process does not run %q", req.Name)
}

// confirm sends b and waits for the server's answer: the change is made
// only after the server kept b.
func (c *conn) confirm(b *Before) error {
	if err := WriteLine(c.out, Reply{Before: b}); err != nil {
		return err
	}
	var g Go
	if err := c.next(&g); err != nil || !g.Go {
		return abi.Errorf(syscall.ECANCELED, "", "the earlier content of %s was not kept, so it was not changed", b.Path)
	}
	return nil
}
