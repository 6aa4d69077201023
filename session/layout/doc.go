// Package layout owns the tree grammar and the store's shape: who asks
// (Caller), the containers and sessions a path names (Container, Ref,
// Classify and its Place kinds), the homes and session directories of a
// store (Homes, SessionDirs), a session's identity and where its logs and
// seals are (ReadIdentity, LogPlace, LocateLog), the server's own
// directory (StateDir, JournalDir), and the store-wide migrations a start
// (or fsck --repair) runs before anything is served: keyed seals
// (OpenSealKey) and history owned by the server (CloseHistory).
//
// It reads the store only through internal/storefs and keeps no state. It
// must never hold sessions, run anything, decide what a caller may do, or
// import the engine, fs, server or cmd: the engine and fsck stand on it.
package layout
