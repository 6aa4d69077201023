package trampoline

import (
	"os"
	"os/exec"

	"github.com/ctxfs/ctxfs/abi"
)

// EnterArgs are the trampoline arguments of an unjailed run (EnterMain):
// enter dir, then exec prog with progArgs.
func EnterArgs(dir, prog string, progArgs []string) []string {
	return append([]string{EnterCommand, dir, prog}, progArgs...)
}

// Launch sets cmd to start binary (the server's own) as the trampoline
// its args name (EnterArgs, JailRun.Args), in "/" with trampolineEnv: the
// write end of a setup pipe at setupFD, env in a memory file at envFD
// and, for a jail, its root at jailRootFD and the run's control socket
// (nil: none) at controlFD. It returns the setup pipe's read end (for
// ReadSetup) and the files the caller closes once the child started;
// jailRoot and control stay the caller's. cmd's credentials
// (SysProcAttr) are the caller's to set.
func Launch(cmd *exec.Cmd, binary string, args, env []string, jailRoot, control *os.File) (setup *os.File, handed []*os.File, err error) {
	envf, err := envFile(env)
	if err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		envf.Close()
		return nil, nil, abi.Wrap("run", err)
	}
	cmd.Path, cmd.Args, cmd.Dir, cmd.Env = binary, append([]string{binary}, args...), "/", trampolineEnv
	cmd.ExtraFiles = []*os.File{w, envf} // setupFD, envFD
	if jailRoot != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, jailRoot) // jailRootFD
		if control != nil {
			cmd.ExtraFiles = append(cmd.ExtraFiles, control) // controlFD
		}
	}
	return r, []*os.File{w, envf}, nil
}
