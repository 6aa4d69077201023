package sealedlog

import "bytes"

// Tail is the last max bytes of the log as it is now, from the first whole
// line (a line cut by the bound is left out), and the offset in the log
// where it starts: what a run is given of a long history, without the
// server holding the whole of it. The byte before the bound is read too:
// it says whether the bound falls at a line's start.
func (l *Log) Tail(max int64) ([]byte, int64) {
	size := l.Size()
	off := size - min(size, max)
	cut := off > 0
	if cut {
		off-- // the byte before: the tail starts after its first newline
	}
	buf := make([]byte, size-off)
	n, _ := l.ReadAt(buf, off)
	buf = buf[:n]
	if cut {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return nil, size
		}
		buf, off = buf[i+1:], off+int64(i+1)
	}
	return buf, off
}
