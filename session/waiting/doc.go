// Package waiting is the server's waiting room: the tool calls of model
// runs (and a CLI's permission prompts) that wait for a person, an
// approval or an answer to an ask_user question (SPEC section 17). It
// owns who may answer a call, the rules of an answer (EACCES, ENOENT,
// EALREADY, EINVAL), each call's deadline and its timeout answer, the
// per-uid bound on waiting calls (EAGAIN), and the listing of what a uid
// may answer (ctx agent pending) without a scan of the sessions.
//
// A call is added by the engine with a Deliver func: the registry calls
// it exactly once per call, with the one answer that won (a person's, or
// the timeout's deny), outside its lock, and Answer returns what Deliver
// returns (the recorded approval_result or answer frame). Recording,
// waking the run and continuing a dormant one after a restart are the
// engine's, inside Deliver.
//
// It must never import the session package, fs, server or cmd, read or
// write the store, or know how a run is recorded: it holds only what the
// engine gave it, in memory, and forgets it when the engine says a run
// ended (Remove).
package waiting
