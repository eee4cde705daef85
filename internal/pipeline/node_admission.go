package pipeline

// What a frame's payload may take before it is read: the admission of
// chunk and raft payloads against the node's budgets (budget.go), the
// check of a chunk's pieces as it arrives, and the budgets' figures.

import (
	"context"
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/transport"
)

// payloadAlloc admits a frame's payload against its budget (client or
// raft), then allocates its buffer; it waits (the connection unread) until
// the bytes fit or the connection or the node closes. A payload that will
// be refused whatever its bytes — a write to a
// pipeline not served or not led here, a raft message of a group not
// served here, a header that does not decode or does not match its
// payload's length — is skipped: read and dropped, nothing allocated (see
// handleSkipped). A chunk's CRC32C pieces are checked as they arrive
// (chunkCheck); one that fails is refused there (handleRefused). No other
// frame carries a payload a datanode takes.
func (n *Node) payloadAlloc(ctx context.Context, t transport.MsgType, header []byte, size int) (transport.Payload, error) {
	var b *byteBudget
	var check transport.PayloadCheck
	var prop *proposal
	switch t {
	case transport.TypeWriteChunk:
		// The proposal the write becomes, its header decoded in place
		// once: the handler takes it from Frame.Decoded.
		prop = &proposal{kind: KindWriteChunk}
		wc := &prop.wc
		if err := wc.Unmarshal(header); err != nil || wc.Length != uint64(size) || engine.CheckChunkArgs(wc.Length, wc.BytesPerChecksum, wc.Checksums) != nil {
			return transport.Payload{}, transport.ErrSkipPayload
		}
		if g := n.group(wc.PipelineID); g == nil || g.leader.Load() != n.cfg.ID {
			return transport.Payload{}, transport.ErrSkipPayload
		}
		b = n.inflight
		check = chunkCheck(wc)
	case transport.TypeRaftMessage:
		if !n.raftRoutable(header) {
			return transport.Payload{}, transport.ErrSkipPayload
		}
		b = n.raftBuf
	default:
		return transport.Payload{}, fmt.Errorf("pipeline: a %v frame with a payload is not served by a datanode", t)
	}
	if err := b.acquire(ctx, int64(size)); err != nil {
		return transport.Payload{}, fmt.Errorf("pipeline: admitting %d payload bytes: %w", size, err)
	}
	out := transport.Payload{Buf: transport.NewPayload(size), Release: b.releaser(int64(size)), Check: check}
	if prop != nil {
		out.Decoded = prop
	}
	return out, nil
}

// chunkCheck verifies a chunk's CRC32C pieces as its payload arrives, on
// the connection's goroutine (transport.PayloadCheck): every replica would
// refuse a chunk whose bytes do not match their checksums, so the leader
// refuses it before it is proposed, at its first bad piece, without
// reading the rest into a buffer. wc has passed CheckChunkArgs for a
// payload of wc.Length bytes: one checksum per piece.
func chunkCheck(wc *transport.WriteChunk) transport.PayloadCheck {
	bpc := int(wc.BytesPerChecksum)
	return transport.PayloadCheck{PieceBytes: bpc, Check: func(off int, span []byte) error {
		if bad := engine.VerifyPieces(span, wc.Checksums[off/bpc:], wc.BytesPerChecksum); bad >= 0 {
			return &pieceMismatch{offsetBytes: uint64(off) + uint64(bad)*uint64(bpc)}
		}
		return nil
	}}
}

// pieceMismatch is chunkCheck's refusal: the piece at offsetBytes into the
// chunk does not match its checksum.
type pieceMismatch struct{ offsetBytes uint64 }

func (e *pieceMismatch) Error() string {
	return fmt.Sprintf("checksum mismatch at offset %d of the chunk", e.offsetBytes)
}

// framePayloadBytes bounds the chunk bytes of one RaftMessage frame (and
// so of one entry): maxRaftPayloadBytes, or less when the raft payload
// budget is smaller — the followers admit a frame against the same budget
// (the members of a pipeline run with the same settings), and a frame
// larger than the whole budget is admitted only alone.
func (n *Node) framePayloadBytes() int {
	return int(min(maxRaftPayloadBytes, n.raftBuf.limit))
}

// raftRoutable reports whether a RaftMessage's payload can be of use: its
// header names a group served here (the loop drops the messages of any
// other), and it is not a MsgApp of a term older than the group's (raft
// rejects those whatever their entries: the transport may lose any
// message, and the stale leader learns of the newer term from the others).
func (n *Node) raftRoutable(header []byte) bool {
	r, err := transport.RaftMessageRouteOf(header)
	if err != nil {
		return false
	}
	g := n.group(r.Group)
	if g == nil {
		return false
	}
	if raftpb.MessageType(r.Type) == raftpb.MessageType_MsgApp && r.Term < g.term.Load() {
		n.metrics.staleRaftPayloads.Inc()
		return false
	}
	return true
}

// BudgetStats are a node's payload budgets: bytes held now and the most
// held at once, client writes and raft messages.
type BudgetStats struct {
	ClientBytes, ClientPeakBytes int64
	RaftBytes, RaftPeakBytes     int64
}

// Budgets returns the payload budgets' use.
func (n *Node) Budgets() BudgetStats {
	var s BudgetStats
	s.ClientBytes, s.ClientPeakBytes, _ = n.inflight.stats()
	s.RaftBytes, s.RaftPeakBytes, _ = n.raftBuf.stats()
	return s
}
