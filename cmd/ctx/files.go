package main

import (
	"io"
	"os"

	"github.com/ctxfs/ctxfs/abi"
)

// runHistory prints messages.jsonl as a transcript, or with --json byte for
// byte (the file may hold lines this ctx does not understand; --json must
// not lose them).
func runHistory(e *env, p *parsed) int {
	w, err := resolve(e, p, p.args[0])
	if err != nil {
		return fail(e, "history", err, exitFailed)
	}
	f, err := os.Open(w.loc.SessionFile(w.session, abi.FileMessages))
	if err != nil {
		return fail(e, "history", err, exitFailed)
	}
	defer f.Close()
	if p.on("json") {
		_, err = io.Copy(e.stdout, f)
	} else {
		err = printHistory(e.stdout, f)
	}
	if err != nil {
		return fail(e, "history", err, exitFailed)
	}
	return exitOK
}

// runOutput prints latest.md as it is.
func runOutput(e *env, p *parsed) int {
	w, err := resolve(e, p, p.args[0])
	if err != nil {
		return fail(e, "output", err, exitFailed)
	}
	return catFile(e, "output", w.loc.SessionFile(w.session, abi.FileLatest))
}

func catFile(e *env, cmd, path string) int {
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		_, err = io.Copy(e.stdout, f)
	}
	if err != nil {
		return fail(e, cmd, err, exitFailed)
	}
	return exitOK
}
