package clienv

// Parsed is a command line after flag parsing.
type Parsed struct {
	Vals  map[string]string   // flags given on the line; bool flags as "true"/"false"
	Multi map[string][]string // every value of each value flag, in order
	Args  []string            // positional arguments, in order
}

func (p *Parsed) Str(name string) string { return p.Vals[name] }

func (p *Parsed) On(name string) bool { return p.Vals[name] == "true" }

// All is every value a repeatable flag was given (--pattern, --keep).
func (p *Parsed) All(name string) []string { return p.Multi[name] }
