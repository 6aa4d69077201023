// Package bashcomp gives a cobra program (ctx, ctxfs) a bash completion
// script that works without the bash-completion package. It only rewrites
// the script cobra generates; it never runs anything.
package bashcomp

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// cobra's bash completion (V2) calls two functions of the bash-completion
// package, _get_comp_words_by_ref and _filedir, which a bash without that
// package (stock Debian, a container) does not have: every Tab then said
// "command not found". The script ctx prints calls ctx's own stand-ins
// instead, which use the package's functions when they are there (they
// know more of bash's quoting) and minimal versions of their own when not.

// bashPackageFuncs are the bash-completion functions cobra's script calls,
// each with the name of its stand-in (PROG: the program's name).
var bashPackageFuncs = [][2]string{
	{"_get_comp_words_by_ref", "__PROG_get_comp_words_by_ref"},
	{"_filedir", "__PROG_filedir"},
}

// bashStandIns defines the stand-ins. Cobra calls the first as
// `-n =: cur prev words cword`, into its caller's locals: the minimal
// version sets those four, joining again the words bash split at = and
// : (COMP_WORDBREAKS), so that --flag=value is one word as the package
// makes it. The second lists directories (-d) or files, filtered by the
// extensions it is given.
const bashStandIns = `
# PROG: stand-ins for the bash-completion package's functions, so that this
# script works without the package.
__PROG_get_comp_words_by_ref()
{
    if declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
        _get_comp_words_by_ref "$@"
        return
    fi
    local i j=-1 w joining=0
    words=()
    cword=0
    for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
        w=${COMP_WORDS[i]}
        if ((j > 0)) && [[ -n $w && -z ${w//[=:]/} ]]; then
            words[j]+=$w
            joining=1
        elif ((j > 0 && joining)); then
            words[j]+=$w
            joining=0
        else
            words[++j]=$w
        fi
        ((i == COMP_CWORD)) && cword=$j
    done
    cur=${words[cword]-}
    prev=
    ((cword > 0)) && prev=${words[cword-1]}
    return 0
}

__PROG_filedir()
{
    if declare -F _filedir >/dev/null 2>&1; then
        _filedir "$@"
        return
    fi
    local IFS=$'\n'
    if [[ ${1-} == -d ]]; then
        COMPREPLY+=($(compgen -d -- "$cur"))
    elif [[ -n ${1-} ]]; then
        COMPREPLY+=($(compgen -d -- "$cur") $(shopt -s extglob; compgen -f -X "!*.@(${1%|})" -- "$cur"))
    else
        COMPREPLY+=($(compgen -f -- "$cur"))
    fi
    compopt -o filenames 2>/dev/null
    return 0
}
`

// Write writes cobra's V2 bash script for root, its calls of the
// package's functions turned into calls of the stand-ins, which it adds
// after the first line (the script's title).
func Write(root *cobra.Command, w io.Writer, withDesc bool) error {
	// cobra's names for the program in the script's functions.
	prog := strings.NewReplacer("-", "_", ":", "_").Replace(root.Name())
	var buf bytes.Buffer
	if err := root.GenBashCompletionV2(&buf, withDesc); err != nil {
		return err
	}
	script := buf.String()
	for _, f := range bashPackageFuncs {
		call := regexp.MustCompile(`\b` + f[0] + `\b`)
		if !call.MatchString(script) {
			return fmt.Errorf("cobra's bash script no longer calls %s: check the stand-ins of internal/bashcomp", f[0])
		}
		script = call.ReplaceAllLiteralString(script, strings.ReplaceAll(f[1], "PROG", prog))
	}
	title, rest, _ := strings.Cut(script, "\n")
	_, err := io.WriteString(w, title+"\n"+strings.ReplaceAll(bashStandIns, "PROG", prog)+rest)
	return err
}

// Install adds cobra's completion command to root (if it has none yet)
// and has its `completion bash` print Write's script instead of cobra's.
func Install(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	bash, _, err := root.Find([]string{"completion", "bash"})
	if err != nil || bash.Name() != "bash" {
		return
	}
	bash.RunE = func(cmd *cobra.Command, args []string) error {
		noDesc, _ := cmd.Flags().GetBool("no-descriptions")
		return Write(root, cmd.OutOrStdout(), !noDesc)
	}
}
