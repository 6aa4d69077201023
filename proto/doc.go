// Package proto is the one request parser and the one frame encoder shared by
// the agent sockets, the session control files and the ctx client: requests
// and frames are JSON objects, one per line (SPEC section 7). It also owns
// the one reading of a messages.jsonl line (Message: role, parts, tool
// calls and results, and the one rule for a message's text), which the
// engine, search, the trajectory export and ctx all use.
//
// It decides what a well-formed request is; it never decides what a request
// may do (that is the session engine's job).
package proto
