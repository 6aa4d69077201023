package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// flagDef declares one long flag. Flags with a value take it as the next
// argument or after "=".
type flagDef struct {
	name  string
	value bool // takes a value; otherwise a boolean switch
}

// parsed is a command line after flag parsing.
type parsed struct {
	vals  map[string]string   // value flags as given; bool flags as "true"/"false"
	multi map[string][]string // every value of each value flag, in order
	args  []string            // positional arguments, in order
}

func (p *parsed) str(name string) string { return p.vals[name] }
func (p *parsed) on(name string) bool    { return p.vals[name] == "true" }

// all is every value a repeatable flag was given (--pattern, --keep).
func (p *parsed) all(name string) []string { return p.multi[name] }

// errHelp asks for the command's usage on stdout, with exit status 0.
var errHelp = errors.New("help requested")

// parseArgs parses flags anywhere on the line, before or after positional
// arguments, because people type `ctx agent send coder hello --session x`
// as often as the other order. "--" ends flags; "-" alone is positional
// (it means stdin). A flag may be spelled -name or --name, as with Go's
// flag package; a repeated flag takes its last value.
func parseArgs(defs []flagDef, argv []string) (*parsed, error) {
	p := &parsed{vals: map[string]string{}, multi: map[string][]string{}}
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			p.args = append(p.args, argv[i+1:]...)
			return p, nil
		case a == "-" || !strings.HasPrefix(a, "-"):
			p.args = append(p.args, a)
			continue
		}
		consumed, err := p.flag(defs, a, argv[i+1:])
		if err != nil {
			return nil, err
		}
		i += consumed
	}
	return p, nil
}

// flag parses one flag argument a; rest is what follows it. It returns how
// many of rest it used (1 for a value given as the next argument).
func (p *parsed) flag(defs []flagDef, a string, rest []string) (int, error) {
	name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
	if name == "h" || name == "help" {
		return 0, errHelp
	}
	d, ok := lookupFlag(defs, name)
	if !ok {
		return 0, fmt.Errorf("unknown flag %s (use -- before an input that starts with -)", a)
	}
	if !d.value {
		if !hasVal {
			val = "true"
		}
		b, err := strconv.ParseBool(val)
		if err != nil {
			return 0, fmt.Errorf("flag --%s takes no value", name)
		}
		p.vals[name] = strconv.FormatBool(b)
		return 0, nil
	}
	used := 0
	if !hasVal {
		if len(rest) == 0 {
			return 0, fmt.Errorf("flag --%s needs a value", name)
		}
		val, used = rest[0], 1
	}
	p.vals[name] = val
	p.multi[name] = append(p.multi[name], val)
	return used, nil
}

func lookupFlag(defs []flagDef, name string) (flagDef, bool) {
	for _, d := range defs {
		if d.name == name {
			return d, true
		}
	}
	return flagDef{}, false
}
