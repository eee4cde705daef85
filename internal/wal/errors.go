package wal

import "errors"

// Errors returned by the log; test them with errors.Is. Every error the log
// returns wraps one of these (or an I/O error) with the segment, offset,
// group or index it concerns.
var (
	// ErrCorrupt marks damage found on disk inside the durable part of the
	// log: a record that fails its CRC or framing checks and is followed by
	// a record written after a sync that covered it, a bad segment header,
	// a segment missing from the sequence, a damaged record in a segment
	// that is not the last, a group whose entries do not start where its
	// compaction point says. It is the log's one corruption marker. A torn
	// tail (the unsynced end of the last write) is not corruption: Open
	// truncates it.
	ErrCorrupt = errors.New("wal: corrupt")
	// ErrFailed is returned by every append, sync and read after a write,
	// fdatasync, segment roll or segment deletion failed: the kernel may
	// have dropped the dirty pages ("fsyncgate"), so the log refuses to
	// acknowledge anything more until it is reopened and recovery has run.
	ErrFailed = errors.New("wal: failed")
	// ErrClosed is any call after Close.
	ErrClosed = errors.New("wal: closed")
	// ErrInvalid is a malformed request: a record of an unknown type, too
	// large, or an entry that would leave a hole in its group's log or go
	// below its compaction point.
	ErrInvalid = errors.New("wal: invalid request")
	// ErrCompacted is a read of an index at or below the group's compaction
	// point (raft.ErrCompacted).
	ErrCompacted = errors.New("wal: requested index is compacted")
	// ErrUnavailable is a read of an index past the group's last entry
	// (raft.ErrUnavailable).
	ErrUnavailable = errors.New("wal: requested index is unavailable")
	// ErrNoLog is returned by Open with Config.MustExist when the directory
	// holds no segment.
	ErrNoLog = errors.New("wal: no log in directory")
)
