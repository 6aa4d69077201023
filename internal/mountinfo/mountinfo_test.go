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
		home.Dev != [2]uint64{0, 40} || !home.IsFUSE() {
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
