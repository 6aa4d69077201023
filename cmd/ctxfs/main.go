// Command ctxfs is the ctxfs server: it mounts <root>/home and
// <root>/shared, serves the agent and model sockets, and runs agents. It
// also verifies stores (fsck) and creates shared spaces.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent"
)

const usage = `usage:
  ctxfs mount [--root DIR] [--store DIR] [--foreground] [--gc-idle 30m]
  ctxfs umount [--root DIR]
  ctxfs clean-stale [--under DIR]
  ctxfs fsck [--store DIR] [--repair]
  ctxfs space add NAME [--group G] [--root DIR | --store DIR]
Defaults: --root $CTX_ROOT or /ctx; --store $CTXFS_STORE, else /var/lib/ctxfs
for root and $XDG_DATA_HOME/ctxfs (~/.local/share/ctxfs) for other users.
clean-stale detaches every ctxfs mount of the machine that no live server
answers for (the leftovers of killed servers); it never touches a live one.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "mount":
		err = cmdMount(os.Args[2:])
	case "umount", "unmount":
		err = cmdUmount(os.Args[2:])
	case "clean-stale":
		err = cmdCleanStale(os.Args[2:])
	case "watchdog": // internal: started by the server, see watchdog.go
		err = cmdWatchdog(os.Args[2:])
	case agent.EnterCommand: // internal: how a run enters its directory (agent.Enter)
		os.Exit(agent.EnterMain(os.Args[2:]))
	case agent.JailCommand: // internal: how a chroot-isolated run is jailed (agent.Jail)
		os.Exit(agent.JailMain(os.Args[2:]))
	case "fsck":
		os.Exit(cmdFsck(os.Args[2:]))
	case "space":
		err = cmdSpace(os.Args[2:])
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "ctxfs: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ctxfs: %v\n", err)
		if _, ok := err.(usageError); ok {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError string

func (u usageError) Error() string { return string(u) }

// defaultRoot is $CTX_ROOT or /ctx.
func defaultRoot() string { return abi.RootFromEnv(os.Getenv) }

// defaultStore is $CTXFS_STORE, else /var/lib/ctxfs for root and
// $XDG_DATA_HOME/ctxfs for everyone else.
func defaultStore() string {
	if s := os.Getenv("CTXFS_STORE"); s != "" {
		return s
	}
	if os.Geteuid() == 0 {
		return "/var/lib/ctxfs"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "ctxfs")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "ctxfs")
}

// flags is a tiny flag parser that accepts flags before and after
// positional arguments, as the SPEC's command lines show them.
type flags struct {
	args   []string
	values map[string]string
	bools  map[string]bool
}

func parseFlags(args []string, valued []string, boolean []string) (*flags, error) {
	f := &flags{values: map[string]string{}, bools: map[string]bool{}}
	isValued := map[string]bool{}
	for _, v := range valued {
		isValued[v] = true
	}
	isBool := map[string]bool{}
	for _, b := range boolean {
		isBool[b] = true
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := cutFlag(a)
		switch {
		case a == "--":
			f.args = append(f.args, args[i+1:]...)
			return f, nil
		case name == "":
			f.args = append(f.args, a)
		case isBool[name] && !hasVal:
			f.bools[name] = true
		case isValued[name] && hasVal:
			f.values[name] = val
		case isValued[name] && i+1 < len(args):
			i++
			f.values[name] = args[i]
		default:
			return nil, usageError(fmt.Sprintf("unknown or incomplete flag %s\n%s", a, usage))
		}
	}
	return f, nil
}

// cutFlag splits "--name=value" or "--name"; name is "" for a non-flag.
func cutFlag(a string) (name, val string, hasVal bool) {
	if len(a) < 3 || a[:2] != "--" {
		return "", "", false
	}
	for i := 2; i < len(a); i++ {
		if a[i] == '=' {
			return a[2:i], a[i+1:], true
		}
	}
	return a[2:], "", false
}

func (f *flags) get(name, def string) string {
	if v, ok := f.values[name]; ok {
		return v
	}
	return def
}

// absFlag returns a flag's value as an absolute path.
func (f *flags) absFlag(name, def string) (string, error) {
	return filepath.Abs(f.get(name, def))
}
