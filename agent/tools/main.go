package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Command is the hidden command of the ctxfs binary that is the tool
// process: `ctxfs __tool`, started as the session's uid through the enter
// or the jail trampoline, speaking the protocol on stdin and stdout.
const Command = "__tool"

// Main is `ctxfs __tool`: it reads one Request, carries it out as the uid
// it runs as, in its working directory (the run's cwd, inside the jail
// for a jailed run), and writes the Reply. It returns the exit status:
// 0 when a Reply was written, whether the call succeeded or not.
func Main(args []string) int {
	if len(args) > 0 && args[0] == execMode {
		return execLimited(args[1:])
	}
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	var req Request
	err := ReadLine(in, &req)
	if err == nil && (req.Args == nil || len(args) != 0) {
		err = abi.Errorf(syscall.EINVAL, Command, "usage: ctxfs %s, with a request on stdin", Command)
	}
	var result any
	if err == nil {
		result, err = call(&req, in, os.Stdout)
	}
	reply := Reply{}
	if err != nil {
		reply.Error = failure(err)
	} else if reply.Result, err = json.Marshal(result); err != nil {
		reply.Result, reply.Error = nil, failure(err)
	}
	if WriteLine(os.Stdout, reply) != nil {
		return 1
	}
	return 0
}

// call carries out req; a change asks the server through in and out
// before it changes anything.
func call(req *Request, in *bufio.Reader, out io.Writer) (any, error) {
	a := req.Args
	switch req.Name {
	case FSRead:
		return readFile(a)
	case FSList:
		return listDir(a)
	case FSStat:
		return statPath(a)
	case FSWrite, FSReplace, FSRemove:
		return change(req.Name, a, func(b *Before) error { return confirm(b, in, out) })
	case ShellExec:
		ctx, cancel := cancelOnHangup(in)
		defer cancel()
		return shell(ctx, a, req.Nproc)
	}
	return nil, abi.Errorf(syscall.EINVAL, req.Name, "the tool process does not run %q", req.Name)
}

// confirm sends b and waits for the server's answer: the change is made
// only after the server kept b.
func confirm(b *Before, in *bufio.Reader, out io.Writer) error {
	if err := WriteLine(out, Reply{Before: b}); err != nil {
		return err
	}
	var g Go
	if err := ReadLine(in, &g); err != nil || !g.Go {
		return abi.Errorf(syscall.ECANCELED, "", "the earlier content of %s was not kept, so it was not changed", b.Path)
	}
	return nil
}

// cancelOnHangup is a context that ends when the server goes (stdin ends)
// or asks the call to stop (SIGTERM, SIGINT, SIGHUP).
func cancelOnHangup(in *bufio.Reader) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		io.Copy(io.Discard, in)
		cancel()
	}()
	return ctx, func() { cancel(); stop() }
}
