package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spindle-store/spindle/internal/transport"
)

// Entry data format (the Data of a raft EntryNormal entry of a pipeline).
//
// An entry carries a batch of commands (many WriteChunk from many clients in
// one entry, item 5 of the pipeline design: the batch grows with the load,
// because the event loop puts everything that arrived since its last turn in
// one proposal). Chunk bytes are never in the entry: the log holds headers
// only; the bytes travel as the RaftMessage frame's payload segments and
// live in the block files.
//
//	| offset | size   | field                                         |
//	|--------|--------|-----------------------------------------------|
//	| 0      | 1      | entry format version = 1                      |
//	| 1      | …      | commands, back to back, at least one          |
//
// Command:
//
//	| size   | field                                                   |
//	|--------|---------------------------------------------------------|
//	| 1      | kind: 1 WriteChunk, 2 PutBlock, 3 DeleteBlock,          |
//	|        |       4 CloseContainer, 5 WriteChunk with its bytes     |
//	| 8      | proposal ID, u64 little-endian (node ID << 48 | counter; |
//	|        | 0: none, nobody waits for the result)                   |
//	| uvarint| body length n (≤ transport.MaxHeaderBytes)              |
//	| n      | body, protobuf: WriteChunk → transport.WriteChunk;      |
//	|        | PutBlock → transport.PutBlock; DeleteBlock and          |
//	|        | CloseContainer → transport.GetBlock (the block or the   |
//	|        | container it names); kind 5: see below              |
//
// Kind 5 (a WriteChunk whose bytes the entry carries) has, after the
// proposal ID:
//
//	| size   | field                                                   |
//	|--------|---------------------------------------------------------|
//	| uvarint| header length n (≤ transport.MaxHeaderBytes)            |
//	| n      | transport.WriteChunk header, protobuf                   |
//	| uvarint| chunk length m (= the header's Length, ≤                |
//	|        | MaxLogInlineBytesLimit)                                 |
//	| m      | the chunk's bytes                                       |
//
// It decodes to a Command of Kind KindWriteChunk with Inline set: every
// reader of a WriteChunk handles both, and only the encoding differs.
//
// An empty entry (raft's own, at a leader change) has no data. Decoding is
// strict: an unknown version or kind, a length past the end or over its
// limit, a body that does not decode, or trailing bytes are ErrBadEntry.

const (
	entryVersion = 1
	// MaxCommandsPerEntry bounds the commands of one entry (a proposal
	// batch); the loop splits larger batches.
	MaxCommandsPerEntry = 4096
	// maxEntryBytes bounds the data of one entry the loop builds (its
	// headers and inline chunk bytes; also below the log's record size,
	// Node.entryBytesMax).
	maxEntryBytes = 512 << 10
	// MaxLogInlineBytesLimit bounds Config.LogInlineMaxBytes, and so the
	// chunk bytes of one kind-5 command: an entry of maxEntryBytes plus
	// one such command stays below the log's default record size (1 MiB).
	MaxLogInlineBytesLimit = 256 << 10
)

// ErrBadEntry marks entry data that does not decode.
var ErrBadEntry = errors.New("pipeline: bad entry")

// Kind is a command's kind (its first byte on disk).
type Kind uint8

// Command kinds. The numbers are part of the on-disk format.
const (
	KindWriteChunk     Kind = 1
	KindPutBlock       Kind = 2
	KindDeleteBlock    Kind = 3
	KindCloseContainer Kind = 4
	// kindWriteChunkInline is the on-disk kind of a WriteChunk carrying
	// its bytes; it decodes to KindWriteChunk with Command.Inline set.
	kindWriteChunkInline Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindWriteChunk:
		return "WriteChunk"
	case KindPutBlock:
		return "PutBlock"
	case KindDeleteBlock:
		return "DeleteBlock"
	case KindCloseContainer:
		return "CloseContainer"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Command is one decoded command. Only the field of its Kind counts:
// WriteChunk (and Inline), PutBlock, or Ref (DeleteBlock: container and
// block; CloseContainer: container).
type Command struct {
	Kind       Kind
	ProposalID uint64
	WriteChunk transport.WriteChunk
	// Inline, for a WriteChunk, is the chunk's bytes when the entry
	// carries them (kind 5 on disk), else nil. Decoded, it shares the
	// entry data's memory (entry data is never changed once built).
	Inline   []byte
	PutBlock transport.PutBlock
	Ref      transport.GetBlock
}

// CommandBytes is the number of bytes AppendCommand appends for c (not
// counting the version byte that starts an entry): the loop sizes an
// entry exactly before building it.
func CommandBytes(c *Command) int {
	var body, inline int
	switch c.Kind {
	case KindWriteChunk:
		body = c.WriteChunk.Size()
		if c.Inline != nil {
			inline = protowire.SizeBytes(len(c.Inline))
		}
	case KindPutBlock:
		body = c.PutBlock.Size()
	default:
		body = c.Ref.Size()
	}
	return commandHeaderBytes + protowire.SizeBytes(body) + inline
}

// commandHeaderBytes: a command's kind byte and proposal ID.
const commandHeaderBytes = 1 + 8

// AppendCommand appends c to entry data dst, starting a new entry (the
// version byte) when dst is empty.
func AppendCommand(dst []byte, c *Command) []byte {
	if len(dst) == 0 {
		dst = append(dst, entryVersion)
	}
	kind := c.Kind
	if kind == KindWriteChunk && c.Inline != nil {
		kind = kindWriteChunkInline
	}
	dst = append(dst, byte(kind))
	dst = binary.LittleEndian.AppendUint64(dst, c.ProposalID)
	switch c.Kind {
	case KindWriteChunk:
		dst = binary.AppendUvarint(dst, uint64(c.WriteChunk.Size()))
		dst = c.WriteChunk.AppendMarshal(dst)
		if c.Inline != nil {
			dst = binary.AppendUvarint(dst, uint64(len(c.Inline)))
			dst = append(dst, c.Inline...)
		}
	case KindPutBlock:
		dst = binary.AppendUvarint(dst, uint64(c.PutBlock.Size()))
		dst = c.PutBlock.AppendMarshal(dst)
	default:
		dst = binary.AppendUvarint(dst, uint64(c.Ref.Size()))
		dst = c.Ref.AppendMarshal(dst)
	}
	return dst
}

// DecodeEntry calls fn for each command of entry data, in order. The
// Command passed to fn is reused between calls (fn copies what it keeps).
// Empty data (raft's empty entry) has no commands.
func DecodeEntry(data []byte, fn func(*Command) error) error {
	return decodeEntry(data, false, fn)
}

// DecodeCommands returns the commands of entry data, each decoded into a
// Command of its own (nothing shared between them or with data).
func DecodeCommands(data []byte) ([]Command, error) {
	// Sized once: an entry holds up to MaxCommandsPerEntry commands of a
	// few hundred bytes each, and growing the slice by appends copied
	// them again and again (a visible share of a 1 KiB write's CPU).
	out := make([]Command, 0, countCommands(data))
	err := decodeEntry(data, true, func(c *Command) error {
		out = append(out, *c)
		return nil
	})
	return out, err
}

// countCommands counts data's commands by their length prefixes alone, at
// most MaxCommandsPerEntry; it stops at the first malformed one (which
// decodeEntry then reports).
func countCommands(data []byte) int {
	if len(data) == 0 || data[0] != entryVersion {
		return 0
	}
	p := data[1:]
	n := 0
	for len(p) >= 9 && n < MaxCommandsPerEntry {
		inline := Kind(p[0]) == kindWriteChunkInline
		p = p[9:]
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			break
		}
		p = p[k+int(l):]
		if inline {
			if l, k = binary.Uvarint(p); k <= 0 || l > uint64(len(p)-k) {
				break
			}
			p = p[k+int(l):]
		}
		n++
	}
	return n
}

// decodeEntry decodes data's commands into one reused Command, or a fresh
// one each (fresh: slices not shared between calls of fn).
func decodeEntry(data []byte, fresh bool, fn func(*Command) error) error {
	if len(data) == 0 {
		return nil
	}
	if data[0] != entryVersion {
		return fmt.Errorf("%w: version %d", ErrBadEntry, data[0])
	}
	p := data[1:]
	if len(p) == 0 {
		return fmt.Errorf("%w: no command", ErrBadEntry)
	}
	var c Command
	for n := 0; len(p) > 0; n++ {
		if n >= MaxCommandsPerEntry {
			return fmt.Errorf("%w: more than %d commands", ErrBadEntry, MaxCommandsPerEntry)
		}
		if len(p) < 9 {
			return fmt.Errorf("%w: command %d truncated", ErrBadEntry, n)
		}
		if fresh {
			c = Command{}
		}
		c.Kind = Kind(p[0])
		c.ProposalID = binary.LittleEndian.Uint64(p[1:9])
		p = p[9:]
		l, k := binary.Uvarint(p)
		if k <= 0 || l > transport.MaxHeaderBytes || l > uint64(len(p)-k) {
			return fmt.Errorf("%w: command %d: bad body length", ErrBadEntry, n)
		}
		body := p[k : k+int(l)]
		p = p[k+int(l):]
		var err error
		c.Inline = nil
		switch c.Kind {
		case kindWriteChunkInline:
			c.Kind = KindWriteChunk
			if err = c.WriteChunk.Unmarshal(body); err != nil {
				break
			}
			m, k := binary.Uvarint(p)
			if k <= 0 || m > MaxLogInlineBytesLimit || m > uint64(len(p)-k) || m != c.WriteChunk.Length || m == 0 {
				return fmt.Errorf("%w: command %d: bad inline chunk length", ErrBadEntry, n)
			}
			c.Inline = p[k : k+int(m) : k+int(m)]
			p = p[k+int(m):]
		case KindWriteChunk:
			err = c.WriteChunk.Unmarshal(body)
		case KindPutBlock:
			err = c.PutBlock.Unmarshal(body)
		case KindDeleteBlock, KindCloseContainer:
			err = c.Ref.Unmarshal(body)
		default:
			return fmt.Errorf("%w: command %d: unknown kind %d", ErrBadEntry, n, uint8(c.Kind))
		}
		if err != nil {
			return fmt.Errorf("%w: command %d (%s): %v", ErrBadEntry, n, c.Kind, err)
		}
		if err := fn(&c); err != nil {
			return err
		}
	}
	return nil
}
