package abi

import (
	"fmt"
	"hash/fnv"
	"strings"
	"syscall"
)

// MaxNameLen is the longest agent, session, space, client id or by-hash key.
const MaxNameLen = 64

// ValidName reports whether s is a valid agent, session, space or client id,
// or by-hash key: [A-Za-z0-9][A-Za-z0-9._+-]{0,63}, not "." or "..", and not
// ending in ".sock" or ".d" (those suffixes name sockets and definitions).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return false
		}
		if !alnum && c != '.' && c != '_' && c != '+' && c != '-' {
			return false
		}
	}
	return !strings.HasSuffix(s, ".sock") && !strings.HasSuffix(s, ".d")
}

// ReservedSessionName is the name under session/ that holds the index.
const ReservedSessionName = "index"

// ValidSessionName is ValidName without the reserved "index".
func ValidSessionName(s string) bool { return ValidName(s) && s != ReservedSessionName }

// CheckName returns an EINVAL error naming what was wrong when s is not a
// valid name of the given kind ("agent", "session", "space", "client id", ...).
func CheckName(kind, s string) error {
	ok := ValidName(s)
	if kind == "session" {
		ok = ValidSessionName(s)
	}
	if !ok {
		return Errorf(syscall.EINVAL, "", "invalid %s name %q", kind, s)
	}
	return nil
}

// ValidModelName reports whether s names a model as "provider/model", each
// part a valid name.
func ValidModelName(s string) bool {
	p, m, ok := strings.Cut(s, "/")
	return ok && ValidName(p) && ValidName(m)
}

// ValidUUID reports whether s is a canonical lowercase UUID
// (8-4-4-4-12 lowercase hex digits).
func ValidUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// CwdKey is the by-cwd index key of an effective cwd: "cwd-" and the 16
// lowercase hex digits of the 64-bit FNV-1a hash of its bytes.
func CwdKey(cwd string) string {
	h := fnv.New64a() // offset basis 0xcbf29ce484222325, prime 0x100000001b3
	h.Write([]byte(cwd))
	return fmt.Sprintf("cwd-%016x", h.Sum64())
}

// ValidCwdKey reports whether s has the shape CwdKey produces.
func ValidCwdKey(s string) bool {
	if len(s) != 20 || !strings.HasPrefix(s, "cwd-") {
		return false
	}
	return isLowerHex(s[4:])
}

// MaxCwdLen is the kernel's PATH_MAX: a path with its NUL.
const MaxCwdLen = 4096

// CheckCwd validates a cwd as the ABI writes it: absolute, no ".." component,
// no NUL, CR or LF, shorter than MaxCwdLen (ENAMETOOLONG). It does not look
// at any filesystem.
func CheckCwd(cwd string) error {
	switch {
	case !strings.HasPrefix(cwd, "/"):
		return Errorf(syscall.EINVAL, "", "cwd %q is not absolute", cwd)
	case strings.ContainsAny(cwd, "\x00\r\n"):
		return Errorf(syscall.EINVAL, "", "cwd contains NUL, CR or LF")
	case len(cwd) >= MaxCwdLen:
		// No directory has a longer path the kernel would chdir to; a
		// session's cwd file, root's in the store and charged to no
		// bound, held up to a value's 1 MiB.
		return Errorf(syscall.ENAMETOOLONG, "", "cwd is %d bytes, a path holds fewer than %d", len(cwd), MaxCwdLen)
	}
	for _, part := range strings.Split(cwd, "/") {
		if part == ".." {
			return Errorf(syscall.EINVAL, "", "cwd %q has a .. component", cwd)
		}
	}
	return nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return len(s) > 0
}
