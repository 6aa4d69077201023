package trampoline

import (
	"reflect"
	"testing"
)

// TestJailArgsRoundTrip: what JailRun.Args writes, parseJailArgs reads
// back whole (the two sides of the exec into JailMain), and the paths
// JailMain relies on are refused when they break its rules.
func TestJailArgsRoundTrip(t *testing.T) {
	r := JailRun{Uid: 1001, Gid: 1002, Groups: []uint32{1234, 1235}, MountRoot: "/ctx", SessionDir: "/ctx/home/1001/agent/a/session/s", Home: "/ctx/home/1001",
		Cwd: "/work", ProgName: "a", ProgHost: "/var/lib/ctxfs/agent/a", ProgArgs: []string{"-p", "x y"}}
	args := r.Args()
	if args[0] != JailCommand {
		t.Fatalf("args %q do not start with %s", args, JailCommand)
	}
	j, err := parseJailArgs(args[1:])
	if err != nil || !reflect.DeepEqual(j.JailRun, r) || j.control {
		t.Fatalf("read back %+v, %v; want %+v", j, err, r)
	}
	for name, bad := range map[string]func(*JailRun){
		"relative cwd":         func(r *JailRun) { r.Cwd = "work" },
		"mount root /":         func(r *JailRun) { r.MountRoot = "/" },
		"unclean program":      func(r *JailRun) { r.ProgHost = "/var/lib/../x" },
		"session outside":      func(r *JailRun) { r.SessionDir = "/etc" },
		"home outside":         func(r *JailRun) { r.Home = "/ctxx/home/1001" },
		"program name with /":  func(r *JailRun) { r.ProgName = "../a" },
		"program name is dots": func(r *JailRun) { r.ProgName = ".." },
	} {
		b := r
		bad(&b)
		if _, err := parseJailArgs(b.Args()[1:]); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
	if _, err := parseJailArgs(args[1:9]); err == nil {
		t.Error("eight arguments taken")
	}
	for _, bad := range []string{"x", "1,", ",1", "1,,2", "-1", "4294967296"} {
		b := append([]string{}, args[1:]...)
		b[2] = bad
		if _, err := parseJailArgs(b); err == nil {
			t.Errorf("groups %q taken", bad)
		}
	}
}
