package main

import (
	"reflect"
	"testing"
)

var sendFlags = commands[0].flags

func TestParseArgsAnyOrder(t *testing.T) {
	for _, c := range []struct {
		argv    []string
		args    []string
		session string
		json    bool
	}{
		{[]string{"coder", "hello", "--session", "x"}, []string{"coder", "hello"}, "x", false},
		{[]string{"--session", "x", "coder", "hello"}, []string{"coder", "hello"}, "x", false},
		{[]string{"--session=x", "coder", "--json", "hello"}, []string{"coder", "hello"}, "x", true},
		{[]string{"-session", "x", "coder", "-"}, []string{"coder", "-"}, "x", false},
		{[]string{"coder", "--", "--session", "-v"}, []string{"coder", "--session", "-v"}, "", false},
		{[]string{"--json=false", "coder", "hi"}, []string{"coder", "hi"}, "", false},
	} {
		p, err := parseArgs(sendFlags, c.argv)
		if err != nil {
			t.Fatalf("%q: %v", c.argv, err)
		}
		if !reflect.DeepEqual(p.args, c.args) || p.str("session") != c.session || p.on("json") != c.json {
			t.Errorf("%q: args %q session %q json %v", c.argv, p.args, p.str("session"), p.on("json"))
		}
	}
}

func TestParseArgsErrors(t *testing.T) {
	for _, argv := range [][]string{
		{"coder", "--session"},      // missing value
		{"coder", "-v", "hi"},       // unknown flag
		{"--json=maybe", "c", "hi"}, // bool with a bad value
	} {
		if _, err := parseArgs(sendFlags, argv); err == nil || err == errHelp {
			t.Errorf("%q: got %v", argv, err)
		}
	}
	if _, err := parseArgs(sendFlags, []string{"coder", "--help"}); err != errHelp {
		t.Errorf("--help: got %v", err)
	}
}

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
		p, err := parseArgs(sendFlags, c.argv)
		if err != nil {
			t.Fatal(err)
		}
		scope, space, err := scopeOf(p)
		if (err != nil) != c.bad || scope != c.scope || space != c.space {
			t.Errorf("%q: got %q %q %v", c.argv, scope, space, err)
		}
	}
}

func TestFindCommand(t *testing.T) {
	c, rest := findCommand([]string{"session", "list", "coder"})
	if c == nil || c.name != "session list" || !reflect.DeepEqual(rest, []string{"coder"}) {
		t.Fatalf("got %v %q", c, rest)
	}
	if c, _ := findCommand([]string{"bogus"}); c != nil {
		t.Fatalf("bogus found %v", c.name)
	}
}
