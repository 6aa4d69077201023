// Package behind owns the queue of derived values written behind (state,
// updated_at, latest.md, cwd, the snapshots): a value the engine puts is
// served from memory at once (Queue.Value) and written to the store
// within Every by one goroutine (Queue.Run); a value changed twice
// meanwhile is written once; a value whose write failed is written again
// at every pass until it holds, served meanwhile when it failed for want
// of room and hidden otherwise; the failed values of sessions not loaded
// ("loose") are bounded (MaxLoose, MaxLooseBytes), the oldest forgotten.
//
// It must never derive a value, read a log, or touch the store except
// through the engine's writer (Store.Write), with the session held as
// the engine holds it (Store.Hold); it must never import the engine, fs,
// server or cmd. What a value is and when it changes are the engine's.
package behind
