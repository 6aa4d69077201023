package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/cli/clienv"
)

func TestAllowsOther(t *testing.T) {
	for conf, want := range map[string]bool{
		"":                                   false,
		"#user_allow_other\n":                false,
		"mount_max = 1000\nuser_allow_other": true,
		"  user_allow_other  # for ctxfs\n":  true,
		"user_allow_other_not\n":             false,
	} {
		if got := allowsOther(strings.NewReader(conf)); got != want {
			t.Errorf("%q: got %v, want %v", conf, got, want)
		}
	}
}

// The store checked is $CTXFS_STORE, else the default of SPEC section 1
// for the server's uid (the caller's when no server is mounted).
func TestDoctorStorePath(t *testing.T) {
	vars := map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": ""}
	e := &clienv.Env{Uid: 1000, Getenv: func(k string) string { return vars[k] }}
	for _, c := range []struct {
		server  int
		xdg     string
		store   string
		want    string
		wantUid int
	}{
		{-1, "", "", "/home/u/.local/share/ctxfs", 1000},
		{-1, "/x", "", "/x/ctxfs", 1000},
		{0, "", "", "/var/lib/ctxfs", 0},
		{0, "", "/srv/s", "/srv/s", 0},
		{1000, "", "/srv/s", "/srv/s", 1000},
	} {
		vars["XDG_DATA_HOME"], vars["CTXFS_STORE"] = c.xdg, c.store
		d := &doctor{e: e, serverUid: c.server}
		if got, uid := d.storePath(); got != c.want || uid != c.wantUid {
			t.Errorf("%+v: got %s uid %d", c, got, uid)
		}
	}
}

// TestDoctorStoreParents: a directory above the store that others may
// change is a problem, named with its fix, by the server's own rule
// (storefs.OtherWriter); a sticky one (as /tmp) is not.
func TestDoctorStoreParents(t *testing.T) {
	above := filepath.Join(t.TempDir(), "above")
	if err := os.Mkdir(above, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode    os.FileMode
		problem string
	}{
		{0o755, ""},
		{0o775, "can be changed by the members of group"},
		{0o777, "can be changed by every user"},
		{0o777 | os.ModeSticky, ""},
	} {
		if err := os.Chmod(above, c.mode); err != nil {
			t.Fatal(err)
		}
		d := &doctor{e: &clienv.Env{Uid: os.Getuid()}}
		d.checkStoreParent("store", above, os.Getuid())
		switch {
		case c.problem == "" && len(d.found) != 0:
			t.Errorf("mode %v: %+v, want no problem", c.mode, d.found)
		case c.problem != "" && (len(d.found) != 1 || !strings.Contains(d.found[0].Problem, c.problem) || !strings.Contains(d.found[0].Fix, "chmod go-w "+above)):
			t.Errorf("mode %v: %+v, want a problem %q with its fix", c.mode, d.found, c.problem)
		}
	}
}

// A CLI's version is the first dotted number it prints, compared part by
// part as numbers.
func TestCLIVersionOrder(t *testing.T) {
	for _, c := range []struct {
		printed, mapped string
		older           bool
	}{
		{"2.1.332 (Claude Code)", "2.1.332", false},
		{"codex-cli 0.99.0", "0.171.0", true},
		{"0.61.1", "0.61.0", false},
		{"1.9.40", "1.18.33", true},
		{"10.0.0", "9.99.99", false},
		{"no version", "1.0.0", false},
	} {
		if got := olderVersion(versionNumber.FindString(c.printed), c.mapped); got != c.older {
			t.Errorf("%q against %s: older %v, want %v", c.printed, c.mapped, got, c.older)
		}
	}
}
