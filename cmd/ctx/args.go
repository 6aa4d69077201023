package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

// flagDef declares one long flag. Flags with a value take it as the next
// argument or after "=" (pflag's rules: --name v, --name=v, and for a
// shorthand -n v or -nv).
type flagDef struct {
	name  string
	value bool // takes a value; otherwise a boolean switch
	// Optional fields; the zero value is a plain long flag.
	short  string // one-letter shorthand, e.g. "n" for -n
	repeat bool   // may be given again and each value is kept (--pattern, --keep)
	// usage is the one-line description in --help. A `word` in backquotes
	// names the value in the help and the synopsis (--session S).
	usage string
}

// with returns f with another description, for a flag whose meaning
// differs by command (--json, --session).
func (f flagDef) with(usage string) flagDef {
	f.usage = usage
	return f
}

// metavar is the value's name in the synopsis: the backquoted word of the
// usage, else "VALUE".
func (f flagDef) metavar() string {
	if _, rest, ok := strings.Cut(f.usage, "`"); ok {
		if word, _, ok := strings.Cut(rest, "`"); ok {
			return word
		}
	}
	return "VALUE"
}

// synopsis is the flag as a usage line shows it: "[--session S]",
// "[--pattern GLOB]...", "[--json]".
func (f flagDef) synopsis() string {
	s := "--" + f.name
	if f.short != "" {
		s = "-" + f.short
	}
	if f.value {
		s += " " + f.metavar()
	}
	s = "[" + s + "]"
	if f.repeat {
		s += "..."
	}
	return s
}

// define adds f to a pflag set. Values are kept as strings: each command
// checks its own (a bad number is its usage error, with its own words).
func (f flagDef) define(fs *pflag.FlagSet) {
	switch {
	case !f.value:
		fs.BoolP(f.name, f.short, false, f.usage)
	case f.repeat:
		fs.StringArrayP(f.name, f.short, nil, f.usage)
	default:
		fs.StringP(f.name, f.short, "", f.usage)
	}
}

// parsedFrom collects the flags of defs that the line gave (a flag that
// was not given is absent from vals: `--cwd ""` and no --cwd differ).
func parsedFrom(fs *pflag.FlagSet, defs []flagDef, args []string) *clienv.Parsed {
	p := &clienv.Parsed{Vals: map[string]string{}, Multi: map[string][]string{}, Args: args}
	for _, d := range defs {
		fl := fs.Lookup(d.name)
		if fl == nil || !fl.Changed {
			continue
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			p.Multi[d.name] = sv.GetSlice()
			p.Vals[d.name] = p.Multi[d.name][len(p.Multi[d.name])-1]
			continue
		}
		p.Vals[d.name] = fl.Value.String()
		if d.value {
			p.Multi[d.name] = []string{p.Vals[d.name]}
		}
	}
	return p
}
