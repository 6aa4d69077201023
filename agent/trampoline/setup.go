package trampoline

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
)

// A run's program is started through a trampoline (the server's own
// binary: EnterMain or JailMain), which prepares the process and then
// execs the program. When the preparation fails, the trampoline writes
// "ERRNO message" to its setup pipe (descriptor setupFD, close-on-exec)
// and exits with status 127; when it succeeds, the exec closes the pipe
// with nothing written. The server turns a report into the run's error
// frame, with the errno and the words that name what is missing, instead
// of a bare "exited with status 127".
const setupFD = 3

// maxSetupReport bounds what the server reads from a setup pipe.
const maxSetupReport = 4 << 10

// setupFailed reports a failed preparation on the setup pipe and returns
// the trampoline's exit status.
func setupFailed(errno syscall.Errno, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	f := os.NewFile(setupFD, "setup")
	fmt.Fprintf(f, "%d %s", int(errno), msg)
	f.Close()
	return 127
}

// ReadSetup reads a setup pipe to its end: nil when the program was
// executed, else the reported failure.
func ReadSetup(r io.Reader) error {
	b, _ := io.ReadAll(io.LimitReader(r, maxSetupReport))
	if len(b) == 0 {
		return nil
	}
	num, msg, _ := strings.Cut(string(b), " ")
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 {
		return abi.Errorf(syscall.EIO, "run", "preparing the run: %s", b)
	}
	return abi.Errorf(syscall.Errno(n), "run", "%s", msg)
}

// CloseOnExec marks every descriptor a trampoline holds beyond stdio
// close-on-exec, so that the program gets none of them: not the setup
// pipe, not a directory outside its chroot (a way out of it), and not one
// the server itself inherited from whoever started it. The server calls
// it too, at its start, for what it runs without a trampoline (a
// compact.d program).
func CloseOnExec() {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		for fd := 3; fd < 1024; fd++ { // kernels before 5.11
			syscall.CloseOnExec(fd)
		}
	}
}
