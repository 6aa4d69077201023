package integration

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestNamesAtEveryLevel: SPEC 3's names through the mount, at every slot
// that takes one: an agent of a home, a space (root's mkdir), a provider,
// a session of a home's and of a space's agent, an archived agent, a
// by-hash key (a create) and a by-uuid key. A name that breaks the rule
// ([A-Za-z0-9][A-Za-z0-9._+-]{0,63}, not ending in .sock or .d) is
// EINVAL; a dot name is none of the ABI's (EPERM, as SPEC 2's names
// outside it; EINVAL for an archived agent, judged as a name first: the
// README's order of mkdir's errnos); nothing is written. Only the session slot and the ctx
// commands' arguments were tested (behaviour unchanged).
func TestNamesAtEveryLevel(t *testing.T) {
	s := newFuseServer(t)
	s.send("a", "a1", "hello")
	s.spaceAdd("team", teamGroup)
	bash(t, "mkdir -p "+s.mnt("shared/team/agent/coder/session/t")+" "+s.mnt("home/0/archived_sessions")+" "+s.mnt("home/0/model"))
	settle()
	mkdir := func(p string) error { return os.Mkdir(p, 0o700) }
	create := func(p string) error { return os.WriteFile(p, []byte("a\n"), 0o600) }
	idx := s.mnt(coderRel + "/session/index")
	slots := []struct {
		dir  string
		make func(string) error
		dot  syscall.Errno // a dot name's errno
	}{
		{s.mnt("home/0/agent"), mkdir, syscall.EPERM},
		{s.mnt("shared"), mkdir, syscall.EPERM},
		{s.mnt("home/0/model"), mkdir, syscall.EPERM},
		{s.mnt(coderRel + "/session"), mkdir, syscall.EPERM},
		{s.mnt("shared/team/agent/coder/session"), mkdir, syscall.EPERM},
		{s.mnt("shared/team/agent"), mkdir, syscall.EPERM},
		{s.mnt("home/0/archived_sessions"), mkdir, syscall.EINVAL},
		{idx + "/by-hash", create, syscall.EPERM},
	}
	bad := []string{"x.sock", "x.d", "-x", "_x", "+x", strings.Repeat("n", 65), "a b", "a:b", "é", "a\tb"}
	for _, sl := range slots {
		for _, name := range bad {
			refusal(t, s, "name "+sl.dir+"/"+name, syscall.EINVAL, func() error { return sl.make(sl.dir + "/" + name) })
		}
		refusal(t, s, "dot name "+sl.dir+"/.x", sl.dot, func() error { return sl.make(sl.dir + "/.x") })
	}
	for _, key := range []string{"0F8FAD5B-D9CB-469F-A165-70867728950E", "0f8fad5bd9cb469fa16570867728950e", "0f8fad5b-d9cb-469f-a165-70867728950", "a"} {
		refusal(t, s, "by-uuid key "+key, syscall.EINVAL, func() error { return create(idx + "/by-uuid/" + key) })
	}
	// The longest name is a name.
	long := strings.Repeat("n", 64)
	for _, p := range []string{s.mnt("home/0/agent/" + long), s.mnt(coderRel + "/session/" + long)} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Errorf("mkdir of a 64-byte name: %v", err)
		}
	}
}
