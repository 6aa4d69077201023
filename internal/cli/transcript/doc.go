// Package transcript renders a session's recorded messages (the lines of
// messages.jsonl) as the text a person reads: `ctx agent history`, chat's
// /history, and the tool results a streaming reply shows. It is shared by
// the inspect, send and chat commands, which is why it stands alone.
//
// It only formats what it is handed: it never opens a file or a socket,
// never touches the store, and decides no exit status.
package transcript
