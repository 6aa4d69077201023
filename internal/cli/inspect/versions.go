package inspect

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

const VersionsHelp = `Lists the file versions of the session (SPEC 17): the state each file was
in before a tool of a run changed it, oldest first, one line each:
version, run, call, action (create: the file did not exist; modify: its
earlier content is kept; delete: a restore removed it), path, and the size
of the kept content (- for a create). PATH keeps the versions of that path
only. ctx agent restore AGENT --version N puts a file back as version N
kept it. On a terminal the columns are aligned under a header; otherwise
fields are tab-separated. --json prints the index's lines as they are.
`

// versionLine is a line of versions/index.jsonl as ctx reads it.
type versionLine struct {
	V      int    `json:"v"`
	Run    string `json:"run"`
	Call   string `json:"call"`
	Path   string `json:"path"`
	Action string `json:"action"`
	Size   *int64 `json:"size"`
}

// Versions prints the session's versions/index.jsonl, read through the
// mount (which verifies it: EIO when it does not).
func Versions(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "versions", err, clienv.ExitFailed)
	}
	f, err := os.Open(w.Loc.SessionFile(w.Session, abi.DirVersions+"/"+abi.FileVersionsIndex))
	if errors.Is(err, fs.ErrNotExist) {
		if merr := clienv.Missing(w, w.Session, err); merr != err {
			return clienv.Fail(e, "versions", merr, clienv.ExitFailed)
		}
		return clienv.ExitOK // the session exists; no tool changed a file yet
	}
	if err != nil {
		return clienv.Fail(e, "versions", err, clienv.ExitFailed)
	}
	defer f.Close()
	only := ""
	if len(p.Args) > 1 {
		only = p.Args[1]
	}
	if err := printVersions(e.Stdout, newLogReader(f), only, p.On("json")); err != nil {
		return clienv.Fail(e, "versions", err, clienv.ExitFailed)
	}
	return clienv.ExitOK
}

// printVersions prints the lines of lr (of path only, when given).
func printVersions(w io.Writer, lr *logReader, only string, asJSON bool) error {
	out := w
	var tw *tabwriter.Writer
	if !asJSON && clienv.IsTerminal(w) {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		out = tw
		fmt.Fprintln(tw, "V\tRUN\tCALL\tACTION\tPATH\tSIZE")
	}
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		var v versionLine
		if json.Unmarshal(line, &v) != nil || only != "" && v.Path != only {
			continue
		}
		if asJSON {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		size := "-"
		if v.Size != nil {
			size = strconv.FormatInt(*v.Size, 10)
		}
		fmt.Fprintf(out, "%d\t%s\t%s\t%s\t%s\t%s\n", v.V, clienv.Printable(v.Run), clienv.Printable(v.Call),
			clienv.Printable(v.Action), clienv.Printable(v.Path), size)
	}
	if tw != nil {
		return tw.Flush()
	}
	return nil
}
