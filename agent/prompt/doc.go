// Package prompt owns the request a model API run starts from (SPEC 10,
// 18): a session's messages.jsonl read into the conversation's turns
// after the summary's cursor, newest first until a budget of tokens is
// spent, and the memos that spare a session's next prompt the parse of
// every line again (Memos: one an engine), each bounded in all and per
// uid.
//
// It reads only the bytes or the log it is handed (a LogSource: the
// engine's sealed log); it never opens a file, runs nothing, decides no
// window (agent fits the prompt to the model's window and compacts it)
// and keeps nothing of one uid's text where another uid's prompt could
// reach it or time it.
package prompt
