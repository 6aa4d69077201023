package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

const AgentListHelp = `Lists the agents and models defined under $CTX_ROOT/agent and
$CTX_ROOT/model, each with the state of its definition (ok, or invalid and
why, as the server would refuse it) and whether its socket is there.
Columns: KIND NAME SOCKET STATE (tab-separated when not on a terminal);
--json: one object per definition: kind, name, state ("ok" or "invalid"),
error (when invalid), socket (true or false).
Exit 0, or 1 when a definition is invalid or the directories cannot be read.
`

// definition is one agent or model as `agent list` and `doctor` report it.
type definition struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	State  string `json:"state"` // "ok" or "invalid"
	Error  string `json:"error,omitempty"`
	Socket bool   `json:"socket"`
	path   string // the socket's path
}

// definitions loads every definition under root with the server's own
// loader, so that "ok" means the server would take it.
func definitions(root string) ([]definition, error) {
	agents, models, err := def.List(root)
	if err != nil {
		return nil, err
	}
	var defs []definition
	for _, name := range agents {
		defs = append(defs, loadDefinition(root, abi.KindAgent, name))
	}
	for _, name := range models {
		defs = append(defs, loadDefinition(root, abi.KindModel, name))
	}
	return defs, nil
}

func loadDefinition(root, kind, name string) definition {
	d := definition{Kind: kind, Name: name, State: "ok", path: abi.SocketPath(root, kind, name)}
	if _, err := def.Load(root, kind, name); err != nil {
		d.State, d.Error = "invalid", definitionError(err)
	}
	d.Socket = clienv.IsSocket(d.path)
	return d
}

// definitionError says what is wrong and where: the file, then the
// reason, without the loader's operation name.
func definitionError(err error) string {
	var ae *abi.Error
	if !errors.As(err, &ae) {
		return err.Error()
	}
	msg := abi.ErrnoName(ae.Errno)
	if ae.Msg != "" {
		msg = ae.Msg
	}
	if ae.Path != "" {
		return ae.Path + ": " + msg
	}
	return msg
}

func AgentList(e *clienv.Env, p *clienv.Parsed) int {
	defs, err := definitions(abi.RootFromEnv(e.Getenv))
	if err != nil {
		return clienv.Fail(e, "list", err, clienv.ExitFailed)
	}
	if p.On("json") {
		enc := json.NewEncoder(e.Stdout)
		enc.SetEscapeHTML(false)
		for _, d := range defs {
			enc.Encode(d)
		}
	} else {
		printDefinitions(e.Stdout, defs)
	}
	for _, d := range defs {
		if d.State != "ok" {
			return clienv.ExitFailed
		}
	}
	return clienv.ExitOK
}

// printDefinitions writes one line per definition: aligned columns under
// a header on a terminal, tab-separated fields for pipelines.
func printDefinitions(w io.Writer, defs []definition) {
	out, flush := table(w, "KIND\tNAME\tSOCKET\tSTATE")
	defer flush()
	for _, d := range defs {
		state := d.State
		if d.Error != "" {
			state += ": " + clienv.Printable(d.Error)
		}
		sock := "no socket"
		if d.Socket {
			sock = "socket"
		}
		fmt.Fprintf(out, "%s\t%s\t%s\t%s\n", d.Kind, d.Name, sock, state)
	}
}

// table is where tab-separated lines go: on a terminal, aligned columns
// under header (flush writes them out); elsewhere w itself, for pipelines.
func table(w io.Writer, header string) (out io.Writer, flush func()) {
	if !clienv.IsTerminal(w) {
		return w, func() {}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	return tw, func() { tw.Flush() }
}
