// Package trampoline is what the server's own binary does between the
// server and a run's program, as its hidden commands: `ctxfs __enter`
// (EnterMain: enter the run's working directory as its uid, then exec
// the program) and `ctxfs __jail` (JailMain: build a chroot-isolated
// run's jail in mount and PID namespaces of its own, confine the thread
// with no capabilities, no_new_privs and a seccomp filter, start the
// program as the run's uid and reap). It owns both sides of how a
// trampoline is started (Launch): the descriptors it is handed (the setup
// pipe, the run's environment in a memory file, the jail's root, the
// control socket), the empty environment it starts with, and the report
// of a failure to start (ReadSetup).
//
// It decides nothing about who runs what: its arguments come from the
// engine's Spec (agent), and it refuses arguments that break what it
// relies on (paths not absolute and clean, a session or home outside the
// mount root, a bad program name). Running as root inside the jail's
// trampoline, it never follows a path a user could have made: trees are
// taken by descriptor, opened beneath their roots without symlinks.
package trampoline
