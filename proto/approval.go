package proto

// The ops and frames of approvals and questions (SPEC 17): a call of a
// model run that waits for a person, and the answers to it.
const (
	// OpApprove answers a waiting approval: run, id, decision, reason.
	OpApprove = "approve"
	// OpAnswer answers a waiting ask_user question: run, id, text.
	OpAnswer = "answer"
	// OpPending lists the calls waiting for the caller: one FramePending
	// each, then FramePendingEnd.
	OpPending = "pending"

	FrameApprovalRequest = "approval_request" // run, id, name, arguments
	FrameApprovalResult  = "approval_result"  // run, id, name, decision, uid, reason
	FrameQuestion        = "question"         // run, id, text
	FrameAnswer          = "answer"           // run, id, uid, text
	FrameResumed         = "resumed"          // run: a waiting run continued after a restart
	FramePending         = "pending"          // agent, session, scope, space, run, id, kind, name, arguments, text, since
	FramePendingEnd      = "pending_end"      // count
)
