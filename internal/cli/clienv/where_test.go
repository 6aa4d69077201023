package clienv

import (
	"strings"
	"testing"
)

func TestScopeOf(t *testing.T) {
	for _, c := range []struct {
		argv         []string
		scope, space string
		bad          bool
	}{
		{nil, "private", "", false},
		{[]string{"--shared", "team"}, "shared", "team", false},
		{[]string{"--space", "team"}, "shared", "team", false},
		{[]string{"--scope", "shared", "--space", "team"}, "shared", "team", false},
		{[]string{"--scope", "temp"}, "temp", "", false},
		{[]string{"--scope", "shared"}, "", "", true},
		{[]string{"--scope", "temp", "--space", "x"}, "", "", true},
		{[]string{"--scope", "private", "--shared", "x"}, "", "", true},
		{[]string{"--scope", "public"}, "", "", true},
	} {
		scope, space, err := scopeOf(flagValues(c.argv))
		if (err != nil) != c.bad || scope != c.scope || space != c.space {
			t.Errorf("%q: got %q %q %v", c.argv, scope, space, err)
		}
	}
}

// flagValues is the Parsed of a line of --name value pairs.
func flagValues(argv []string) *Parsed {
	p := &Parsed{Vals: map[string]string{}}
	for i := 0; i+1 < len(argv); i += 2 {
		p.Vals[strings.TrimPrefix(argv[i], "--")] = argv[i+1]
	}
	return p
}
