// Package agentadd is `ctx agent add NAME --cli CLI`: it writes a working
// definition of a coding-agent CLI agent (SPEC 16) under the root's agent/
// directory, so that no one has to write control files by hand: the
// program agent/NAME, a symbolic link to the CLI's real executable, and
// agent/NAME.d/ with cli, isolation and the optional endpoint, model_id,
// api_key_env or api_key_file.
//
// Definitions are root's (the server runs what they say, for every user),
// so only root, or the uid that owns agent/ (a server serving its own
// user), may add one; and the executable it links must be changeable by no
// one else either, or that one could run code as every user who sends to
// the agent. A new definition appears whole, by one rename of its staged
// NAME.d/; an existing agent is replaced only with --force (then by one
// exchange of the two directories). A refusal writes nothing.
//
// It never runs the CLI (ctx doctor does, for its version) and never
// reads or writes a key: api_key_env names a variable of the server's
// environment, api_key_file a root-owned file.
package agentadd
