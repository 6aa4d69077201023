package sessions

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// personaFields are the meta.json fields that describe who a session is
// (SPEC section 14); session list --json shows them, in this order.
var personaFields = []string{"name", "self_id", "rule", "model", "reasoning"}

// maxValueBytes bounds what is read of a single-value file or meta.json:
// the server keeps them small, and a listing must not grow with a damaged
// one.
const maxValueBytes = 1 << 20

// List prints index/list, newest first as the server keeps it,
// or with --json one object per session in the same order. An agent that
// is defined but never used here has no index yet: that is an empty list.
func List(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.ResolveLoc(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "session list", err, clienv.ExitFailed)
	}
	f, err := os.Open(w.Loc.IndexFile("list"))
	if errors.Is(err, fs.ErrNotExist) && clienv.Located(w) == nil {
		return clienv.ExitOK
	}
	if err != nil {
		return clienv.Fail(e, "session list", clienv.Missing(w, "", err), clienv.ExitFailed)
	}
	defer f.Close()
	if !p.On("json") {
		_, err = io.Copy(e.Stdout, f)
		if err != nil {
			return clienv.Fail(e, "session list", err, clienv.ExitFailed)
		}
		return clienv.ExitOK
	}
	return listSessionsJSON(e, w, f)
}

// listSessionsJSON prints one object per name of the list. A session that
// is gone by the time it is read (archived meanwhile) is left out; one
// that cannot be read is reported and makes the exit status 1.
func listSessionsJSON(e *clienv.Env, w *clienv.Where, list io.Reader) int {
	code := clienv.ExitOK
	sc := bufio.NewScanner(list)
	for sc.Scan() {
		name := sc.Text()
		if !abi.ValidSessionName(name) {
			continue
		}
		o, err := sessionObject(w, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			fmt.Fprintf(e.Stderr, "ctx: session list: %s: %s\n", name, clienv.Describe("session list", err))
			code = clienv.ExitFailed
		}
		if o != nil {
			e.Stdout.Write(o.Line())
		}
	}
	if err := sc.Err(); err != nil {
		return clienv.Fail(e, "session list", err, clienv.ExitFailed)
	}
	return code
}

// sessionObject describes one session: name, state, timestamps, and the
// persona fields of meta.json as they are written there. It returns what
// it could read together with the first error; fs.ErrNotExist with a nil
// object when the session directory is gone.
func sessionObject(w *clienv.Where, name string) (*proto.Object, error) {
	if _, err := os.Stat(filepath.Join(w.Loc.SessionsDir(), name)); err != nil {
		return nil, err
	}
	o := proto.NewObject("name", name)
	var first error
	keep := func(err error) {
		if first == nil && err != nil && !errors.Is(err, fs.ErrNotExist) {
			first = err
		}
	}
	state, err := readValue(w.Loc.SessionFile(name, abi.FileState))
	keep(err)
	if err == nil {
		o.Set("state", state)
	}
	for _, file := range []string{abi.FileUpdatedAt, abi.FileCreatedAt} {
		keep(setUnix(o, file, w.Loc.SessionFile(name, file)))
	}
	meta, err := persona(w.Loc.SessionFile(name, abi.FileMeta))
	keep(err)
	if meta != nil {
		o.Set("meta", meta)
	}
	return o, first
}

// setUnix sets key to the Unix seconds in path, when it holds a number.
func setUnix(o *proto.Object, key, path string) error {
	v, err := readValue(path)
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return abi.Errorf(syscall.EIO, "", "%s holds %q, not Unix seconds", key, v)
	}
	o.Set(key, n)
	return nil
}

// persona picks the persona fields of a meta.json; nil when it has none.
func persona(path string) (*proto.Object, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	meta, err := proto.ParseObject(b, false)
	if err != nil {
		return nil, abi.Errorf(syscall.EIO, "", "meta.json: %v", err)
	}
	out := &proto.Object{}
	for _, k := range personaFields {
		if raw := meta.Raw(k); raw != nil {
			out.Set(k, raw)
		}
	}
	if len(out.Fields) == 0 {
		return nil, nil
	}
	return out, nil
}

// readValue reads a single-value file without its final newline.
func readValue(path string) (string, error) {
	b, err := readSmall(path)
	return strings.TrimSuffix(string(b), "\n"), err
}

// readSmall reads a file of at most maxValueBytes; a larger one is EIO.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxValueBytes+1))
	if err == nil && len(b) > maxValueBytes {
		err = abi.Errorf(syscall.EIO, "", "%s is over %d bytes", filepath.Base(path), maxValueBytes)
	}
	return b, err
}
