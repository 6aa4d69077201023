// Package trajectory exports a ctxfs session as one ATIF v1.7 document (the
// Agent Trajectory Interchange Format of Harbor RFC 0001; SPEC section 13).
//
// It streams: both logs are read a line at a time, each step is written as
// soon as it is complete, and memory holds one step plus the tool calls of
// the active runs that have not found their place yet. Every step is
// validated against the step schema, and the envelope against the document
// schema, before the export reports success; a caller that must never print
// an invalid document writes to a buffer it can discard (ctx uses a
// temporary file).
//
// The mapping (SPEC 13, with the choices the SPEC leaves open):
//
//   - messages.jsonl is the backbone: each user message is a user step, each
//     system message a system step, each assistant message an agent step.
//     Its "tool" messages carry the tool results; events.jsonl's copies of
//     them (and of the messages) only serve to line the two logs up.
//   - events.jsonl gives the tool calls (tool_call frames) and the usage.
//     Tool calls found as tool_call parts of an assistant message belong to
//     that message's step; the tool_call frame that repeats one of them
//     (SPEC 6 records both) is not counted twice.
//   - A tool call waits until its result comes, then takes its place with
//     it: in the run's current agent step when that is the step being built
//     (the assistant message that came before it), else in an agent step of
//     its own with an empty message (ATIF's message may be empty; no text
//     is made up). Calls of the run made before it go along, in order.
//     Calls still unanswered when the run ends (done, or the end of the
//     logs) are placed the same way.
//   - A tool result joins only a step that holds a tool call of the same
//     run and id; any other result is dropped.
//   - A usage frame becomes the metrics (prompt_tokens, completion_tokens,
//     summed when a step gets several) and model_name of the run's current
//     agent step, or of its next assistant message step when it came first.
//   - Each step's extra holds its run id; step_ids are given as steps are
//     written, so they are 1..N whatever was dropped.
package trajectory
