package def

import (
	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
)

// CLIDef is a coding-agent CLI agent's definition (SPEC 16):
// agent/NAME.d/cli names the CLI; model_id, endpoint, api_key_env and
// api_key_file are read as a model API's are.
type CLIDef struct {
	Adapter cli.Adapter
	Options cli.Options // Model and BaseURL; a run's Resume is its own
	KeySource
}

// cliFiles are the control files of a CLI agent, besides cli itself.
var cliFiles = []string{"model_id", "endpoint", "api_key_env", "api_key_file"}

// readCLI reads an agent's cli and the files that go with it; each
// invalid value is EINVAL naming its file. An abi file is refused: the
// CLI's stream is read by its adapter, never as jsonl or text.
func (d *Definition) readCLI() error {
	if d.Kind != abi.KindAgent {
		return nil
	}
	name, ok, err := d.oneLine("cli")
	if !ok || err != nil {
		return err
	}
	a, err := cli.Lookup(name)
	if err != nil {
		return d.invalid("cli", "%q is not one of %v", name, cli.Names())
	}
	if _, has, _ := d.read("abi"); has {
		return d.invalid("abi", "a cli agent's output is read by its CLI's adapter: remove abi")
	}
	v, err := d.oneLines(cliFiles)
	if err != nil {
		return err
	}
	c := &CLIDef{Adapter: a, Options: cli.Options{Model: v["model_id"], BaseURL: v["endpoint"]}, KeySource: KeySource{v["api_key_env"], v["api_key_file"]}}
	if err := d.checkKeySource(c.KeySource); err != nil {
		return err
	}
	if _, err := a.Invocation(c.Options); err != nil {
		return d.invalid("endpoint", "%s", abi.Message(err))
	}
	d.CLI = c
	return nil
}

// CLIInvocation is the CLI's invocation for a run that resumes the CLI
// session resume ("" for a new one): what the engine prepares (its Files
// under HOME) and hands back in Spec.CLI.
func (d *Definition) CLIInvocation(resume string) (cli.Invocation, error) {
	o := d.CLI.Options
	o.Resume = resume
	return d.CLI.Adapter.Invocation(o)
}
