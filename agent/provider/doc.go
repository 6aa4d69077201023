// Package provider streams one reply from a model's HTTP API: OpenAI Chat
// Completions ("openai-chat", also served by Ollama, vLLM, llama.cpp's
// server and most gateways) or Anthropic Messages ("anthropic-messages"),
// for the built-in model APIs of SPEC section 10.
//
// It speaks both wire formats with plain net/http rather than the
// providers' SDKs, on purpose:
//
//   - The SDKs read OPENAI_API_KEY, ANTHROPIC_API_KEY and the *_BASE_URL
//     variables from the process environment by default. The ctxfs server
//     runs as root for every local user; it must never pick up a key or an
//     endpoint that no model definition configured. Here everything comes
//     from modelapi.Config, and the default client does not even take a proxy from
//     the environment.
//   - The SDKs retry by default. A retry hides a 429 that the caller must
//     see as EAGAIN, and multiplies what one request costs. Stream sends
//     exactly one request.
//   - We need exact control of timeouts (a bound on the whole request and
//     a bound on silence), of cancellation (a cancelled run stops at once
//     and emits nothing more), of how much of a reply or an error body is
//     read, and of error messages (a key must never reach one).
//   - Both wire formats are small: a JSON request and a server-sent event
//     stream.
//
// A request may offer tools (SPEC 17), in each API's own format, under
// their names on the wire ("fs.read" goes as "fs_read": the APIs allow no
// dot); the calls a reply makes come back in modelapi.Result.ToolCalls under the
// offered tools' own names, within MaxToolCalls and MaxToolCallBytes. A
// call of the conversation's history goes out as a call only when its tool
// is offered in the same request; otherwise it and its result go as text,
// so that a request never carries a call the API would refuse for want of
// its tool's definition, and never declares a tool the run does not offer.
// This package only describes tools and reads calls: it runs none.
//
// Connections are kept between requests, each uid's its own (modelapi.Owner;
// transport.go): a kept connection answers sooner, so one pool for all
// would tell a user that someone used a provider lately. A reply read to
// its end of stream is read on to its body's end in the background,
// within bounds (drain.go), so that its connection is kept.
//
// Errors are *abi.Error values whose errno says what the caller can do:
// ECONNREFUSED or EHOSTUNREACH (nothing answered), ETIMEDOUT, EACCES (the
// key), EAGAIN (rate limited), EINVAL (the request, its tools or the
// definition), EIO (the provider failed or its stream broke), EFBIG (the
// reply, its tool calls or its stream as read, MaxReplyBytes, too large),
// ECANCELED (the caller cancelled).
//
// The API key is sent only in the API's auth header. It never appears in
// a URL, a request body, an error message, a delta or a Result: every
// provider-supplied text is scrubbed of it before it leaves the package.
package provider
