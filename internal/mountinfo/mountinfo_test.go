package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	info := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
45 26 0:40 / /ctx/home rw,nosuid,nodev,relatime - fuse.ctxfs ctxfs rw,user_id=0,group_id=0,default_permissions,allow_other
46 26 0:41 / /ctx/shared rw,nosuid - fuse.ctxfs ctxfs rw,user_id=1000,group_id=1000
47 26 0:42 / /ctx/shared rw - tmpfs none rw
48 26 0:43 / /my\040dir rw - fuse.sshfs host:/x rw,user_id=5
49 26 x:y / /bad rw - fuse x rw
short line
`
	ms, err := Parse(strings.NewReader(info))
	if err != nil || len(ms) != 5 {
		t.Fatalf("%d mounts, %v", len(ms), err)
	}
	home, ok := Top(ms, "/ctx/home")
	if uid, hasUid := home.UserID(); !ok || home.FSType != FSTypeCtxfs || home.Source != "ctxfs" || uid != 0 || !hasUid ||
		home.Dev != [2]uint64{0, 40} || home.ID != 45 || !home.IsFUSE() {
		t.Fatalf("home %+v", home)
	}
	if top, _ := Top(ms, "/ctx/shared"); top.FSType != "tmpfs" || top.IsFUSE() {
		t.Fatalf("shared: the later mount is on top, got %+v", top)
	}
	if m, ok := Top(ms, "/my dir"); !ok || m.FSType != "fuse.sshfs" {
		t.Fatalf("escaped mount point: %+v %v", m, ok)
	}
	if _, ok := ms[0].UserID(); ok {
		t.Fatal("ext4 has a user_id")
	}
	if _, ok := Top(ms, "/nowhere"); ok {
		t.Fatal("found a mount at /nowhere")
	}
}

// TestHolding: the mount that holds a path is the one at its deepest
// directory, the later of two at one directory; Has reads super options.
func TestHolding(t *testing.T) {
	info := `22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 22 0:50 / /mnt/mfs rw - fuse.mfs mfs#10.0.0.1:9421 rw,user_id=0,group_id=0,allow_other
31 22 0:51 / /mnt/mfs2 rw - fuse.mfs mfs#10.0.0.1:9421 rw,user_id=0,group_id=0,default_permissions,allow_other
32 30 0:52 / /mnt/mfs/inner rw - tmpfs none rw
33 30 0:53 / /mnt/mfs/inner rw - fuse.x x rw
`
	ms, err := Parse(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/mnt/mfs/store":        "fuse.mfs",
		"/mnt/mfs":              "fuse.mfs",
		"/mnt/mfsx/store":       "ext4", // a name that only starts like a mount point
		"/mnt/mfs/inner/store":  "fuse.x",
		"/var/lib/ctxfs":        "ext4",
		"/mnt/mfs2/store/inner": "fuse.mfs",
	} {
		if m, ok := Holding(ms, path); !ok || m.FSType != want {
			t.Errorf("Holding(%s) = %s %v, want %s", path, m.FSType, ok, want)
		}
	}
	a, _ := Holding(ms, "/mnt/mfs/store")
	b, _ := Holding(ms, "/mnt/mfs2/store")
	if a.Has("default_permissions") || !b.Has("default_permissions") || !b.Has("allow_other") {
		t.Errorf("Has: %v %v", a.Super, b.Super)
	}
}
