package agent

// Enter is the program that enters a run's working directory for it (the
// server's own binary, run as a trampoline: trampoline.EnterMain and
// trampoline.JailMain), or "" to let the forked child enter it itself.
//
// Why: a run's working directory is under the mount, which this very
// process serves. Go starts a program with vfork: the forking thread and
// its P stay suspended until the child calls exec. A child that entered
// its directory before exec would wait on a FUSE lookup that needs a P of
// the server, and with two runs starting at once on two cores none is
// left: the server, its runs and every caller of the mount stop. So the
// child execs this binary at once, in "/", and the new process, which
// suspends no one, enters the directory and execs the program. (The
// session tests, which run no mount, leave it "".)
var Enter string
