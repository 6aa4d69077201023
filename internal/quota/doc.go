// Package quota owns the bounds of what users may make the server hold:
// per-uid and total counts (connections, open files, runs, searches,
// unfinished bytes, a model's replies read on after their end), the free
// trees' bytes and inodes per uid (EDQUOT), the sessions, index entries
// and agents of each uid's home and each shared space (EDQUOT), the
// server-wide scan slots searches take turns on, the session budget of
// the descriptor limit, and the CTXFS_LIMITS grammar that overrides them.
//
// It decides only whether one more fits, and says no with the bound's
// errno at once, never by waiting (the scan slots excepted, which are a
// turn, not a refusal). It sits below the engine and the agents (both
// count with it). It must never read the store, know the tree's names,
// or import the engine, the agents, fs, server or cmd: what a uid keeps
// in the free trees, and the names a home's indexes keep, are counted by
// functions the engine hands it (FreeQuota.CountWith, Names.CountWith).
package quota
