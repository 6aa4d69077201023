// Package agent owns the running of one agent turn (SPEC section 10), as
// an agent or model definition (agent/def) says, and resolves a run's cwd inside an agent's
// chroot (SPEC section 8, step 6). It runs a model run's built-in tool
// calls (toolSession, ExecTool, SPEC 17) in a tool process of the run's
// own (agent/tools), started as the run's uid exactly as its program would
// be and ended with the run, and never acts on a user's path itself.
//
// It starts programs as the uid and gid it is given, and turns
// their output into frames. It never writes a log, a session file or the
// index, and it never decides who may run what: the session engine chooses
// the uid, the cwd and the environment, and records the frames Run emits.
//
// Frames that Run emits carry neither "run" nor "ts": the engine stamps both
// on every frame when it records it, so that a program can never forge them.
package agent
