package sealedlog

// A memory log (a temp session's) has no file, no seal and no journal:
// it is never unprovable and never durable. Its content is memBuf.

// NewMemory is a log kept only in memory (temp sessions): no files, no
// seal, never unprovable.
func NewMemory() *Log {
	return &Log{mem: true}
}

func (l *Log) appendMemory(data []byte) int64 {
	l.memMu.Lock()
	defer l.memMu.Unlock()
	off := int64(len(l.memBuf))
	l.memBuf = append(l.memBuf, data...)
	l.length.Store(int64(len(l.memBuf)))
	return off
}

func (l *Log) readMemory(p []byte, off int64) int {
	l.memMu.RLock()
	defer l.memMu.RUnlock()
	return copy(p, l.memBuf[off:])
}
