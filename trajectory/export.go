package trajectory

import (
	"io"

	"github.com/ctxfs/ctxfs/abi"
)

// Export writes the session whose logs are messages and events (nil: none)
// to w as one ATIF document. It reads each log once, a line at a time,
// and is done with both readers when it returns.
//
// On error w may hold part of a document: a caller that must print only a
// valid document buffers w and discards it on error. The errors are an
// *InvalidError (EINVAL) when the document would not validate, an ENODATA
// *abi.Error when the session has nothing to make a step of, an EIO
// *abi.Error for a damaged log line, or the error of a read or write.
func Export(w io.Writer, messages, events io.Reader, info Info) error {
	sch, err := compiled()
	if err != nil {
		return err
	}
	enc, err := newEncoder(w, sch, info)
	if err != nil {
		return err
	}
	evs := newLineReader(abi.FileEvents, events, parseEvent)
	defer evs.stop()
	msgs := newLineReader(abi.FileMessages, messages, parseMessage)
	defer msgs.stop()
	m := newMapper(evs, enc.step)
	if err := m.run(msgs); err != nil {
		return err
	}
	return enc.finish()
}
