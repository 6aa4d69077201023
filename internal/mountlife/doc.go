// Package mountlife owns a FUSE mount's life outside the file operations:
// whether this process can mount at all (CanMount), finding and cleaning
// dead mounts left by a killed server (CleanStale, AbortDead,
// CleanDeadCtxfs, through fusectl), the watchdog process that ends a
// SIGKILLed server's connections and detaches its mounts
// (StartWatchdog, RunWatchdog), and a server's own clean unmount
// (Conn.End).
//
// It never serves a file operation and never touches the store: it reads
// the mount table, fusectl and /proc, and aborts or detaches only a
// connection it has just found dead, a dead server's own, or, at a clean
// stop, the stopping server's own. A mount that answers is left alone:
// it has a live server, perhaps not ours.
package mountlife
