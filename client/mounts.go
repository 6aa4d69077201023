package client

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo, the fields `ctx doctor`
// needs.
type Mount struct {
	Dir    string // mount point, unescaped
	FSType string // "fuse.ctxfs" for a ctxfs mount
	Source string
	Super  []string // super block options: "rw", "user_id=0", …
}

// FSTypeCtxfs is what the kernel lists for a ctxfs mount.
const FSTypeCtxfs = "fuse.ctxfs"

// ReadMounts lists the mounts of this process's mount namespace.
func ReadMounts() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMountinfo(f)
}

// ParseMountinfo reads mountinfo lines:
//
//	id parent major:minor root mountpoint options [optional...] - fstype source super
//
// Lines of another shape are skipped.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var ms []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+3 >= len(fields) {
			continue
		}
		ms = append(ms, Mount{Dir: unescapeOctal(fields[4]), FSType: fields[sep+1],
			Source: unescapeOctal(fields[sep+2]), Super: strings.Split(fields[sep+3], ",")})
	}
	return ms, sc.Err()
}

// MountAt returns the topmost mount at dir (of two mounts at one
// directory, mountinfo lists the later, which is on top, last).
func MountAt(ms []Mount, dir string) (Mount, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Dir == dir {
			return ms[i], true
		}
	}
	return Mount{}, false
}

// UserID is the uid that made a FUSE mount (its user_id option): the uid
// its server runs as.
func (m Mount) UserID() (int, bool) {
	for _, o := range m.Super {
		if v, ok := strings.CutPrefix(o, "user_id="); ok {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
	}
	return 0, false
}

// unescapeOctal undoes mountinfo's \ooo escapes (space, tab, newline,
// backslash in paths).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
