//go:build !amd64

package trampoline

// Only amd64 has a jail filter yet; elsewhere a jail refuses to start
// (ENOTSUP) rather than run without one.
const (
	auditArch      = 0
	x32Bit         = 0
	sysClone       = 0
	sysClone3      = 0
	sysPersonality = 0
)

var deniedSyscalls []uint32
