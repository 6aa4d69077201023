// Package modelapi says what a built-in model API (SPEC 10) is, as plain
// data: a model definition's settings (Config) and their checks, the
// conversation a request carries (Turn, Request, Tool, Owner), what a
// reply comes to (Result), and how a provider's failures read (an HTTP
// status or an error body, as the errno the caller acts on).
//
// It must never connect anywhere or import net/http: the definitions
// (agent/def), the context window (agent/window) and the coding-agent
// CLIs' adapters (agent/cli) speak these types, and ctx, which reads
// definitions, links none of an HTTP client. agent/provider is the
// package that sends a Request and streams its reply.
package modelapi
