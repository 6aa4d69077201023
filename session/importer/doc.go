// Package importer carries out the import op of an agent socket (SPEC 16,
// `ctx agent import`): a request line naming the CLI, the session's uuid,
// its cwd and how many messages follow, then those messages, one
// messages.jsonl line each, on the same connection; the engine then makes
// the whole session in one step (session.Engine.CreateImported).
//
// It owns the import's wire shape and bounds, and judges everything the
// client sends as hostile: the client reads the user's CLI files
// (agent/cli.ReadSession) and may send anything instead. Each message is
// held against the caller's share of unfinished bytes
// (quota.Limits.Partial: EAGAIN beyond, at once), must be one JSON object
// of a message's role, without a run id (an imported line has none) and
// without the import marker, which this package adds ("imported": the
// CLI), and is stamped with the caller's uid as a line appended through
// the mount is. It never opens a path: the client sends the content, and
// the server reads no file the client names.
package importer
