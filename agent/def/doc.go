// Package def reads agent and model definitions (SPEC sections 10 and
// 16–18) from the host directories <root>/agent and <root>/model: a
// definition's program, model, environment, isolation, timeout, skills,
// built-in API or coding-agent CLI, tools and their approval, children and
// context window, each control file checked and refused with EINVAL
// naming the file; and keeps what it read until a file of it changes
// (Cache).
//
// It only reads: it never runs a program, never calls a provider (a
// model API's settings are agent/modelapi's plain data) and never writes.
// So ctx links it, to say what the server would take (ctx agent list, ctx
// doctor), without linking an HTTP client; the server's runs
// (package agent) take a Definition from it.
package def
