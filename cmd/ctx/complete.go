package main

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// Shell completion (ctx completion bash|zsh|fish) asks the binary itself
// (cobra's hidden __complete command). Agents come from the definitions and
// sockets under the root, sessions from the agent's index/list, spaces from
// shared/: only names, read the way ls would, never a request to the
// server.

const noFiles = cobra.ShellCompDirectiveNoFileComp

// completeArgs completes the positional word the cursor is on by its name
// in posNames: AGENT and SESSION have candidates; the rest (INPUT, RUN)
// has none, and no file names either.
func completeArgs(e *clienv.Env, c *command) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch posWord(c.posNames, len(args)) {
		case "AGENT":
			return matching(agentNames(abi.RootFromEnv(e.Getenv)), prefix), noFiles
		case "SESSION":
			return matching(sessionNames(e, cmd, args), prefix), noFiles
		}
		return nil, noFiles
	}
}

// completeFlags completes the values of the flags that name something.
func completeFlags(e *clienv.Env, c *command, cc *cobra.Command) {
	for _, f := range c.flags {
		var fn cobra.CompletionFunc
		switch f.name {
		case "session", "keep":
			fn = func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return matching(sessionNames(e, cmd, args), prefix), noFiles
			}
		case "shared", "space":
			fn = func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return matching(dirNames(filepath.Join(abi.RootFromEnv(e.Getenv), "shared")), prefix), noFiles
			}
		case "scope":
			fn = cobra.FixedCompletions([]cobra.Completion{abi.ScopePrivate, abi.ScopeShared, abi.ScopeTemp}, noFiles)
		case "archive-dir":
			fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return nil, cobra.ShellCompDirectiveFilterDirs
			}
		default:
			if f.value {
				fn = cobra.NoFileCompletions
			}
		}
		if fn != nil {
			cc.RegisterFlagCompletionFunc(f.name, fn)
		}
	}
}

// posWord is the name of positional argument i in a synopsis such as
// "AGENT [RUN]" or "AGENT INPUT...": brackets and dots dropped, the last
// word standing for every argument after it when it repeats.
func posWord(posNames string, i int) string {
	words := strings.Fields(posNames)
	if len(words) == 0 {
		return ""
	}
	if i >= len(words) {
		if !strings.HasSuffix(words[len(words)-1], "...") {
			return ""
		}
		i = len(words) - 1
	}
	return strings.Trim(words[i], "[].")
}

// agentNames lists the agents under root: definitions (NAME.d/, the
// program NAME) and sockets (NAME.sock), each name once, sorted.
func agentNames(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, abi.KindAgent))
	seen := map[string]bool{}
	var names []string
	for _, d := range entries {
		name := strings.TrimSuffix(strings.TrimSuffix(d.Name(), abi.DefinitionSuffix), abi.SocketSuffix)
		if abi.ValidName(name) && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// sessionNames lists the sessions of the agent in args[0], in the home or
// in the space of --shared, newest first as index/list keeps them.
func sessionNames(e *clienv.Env, cmd *cobra.Command, args []string) []string {
	if len(args) == 0 {
		return nil
	}
	space, _ := cmd.Flags().GetString("shared")
	loc := client.Loc{Root: abi.RootFromEnv(e.Getenv), Uid: e.Uid, Space: space, Agent: args[0]}
	if loc.Check() != nil {
		return nil
	}
	f, err := os.Open(loc.IndexFile("list"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if abi.ValidSessionName(sc.Text()) {
			names = append(names, sc.Text())
		}
	}
	return names
}

// dirNames lists the directories in dir whose names are ABI names.
func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, d := range entries {
		if d.IsDir() && abi.ValidName(d.Name()) {
			names = append(names, d.Name())
		}
	}
	return names
}

func matching(names []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}
