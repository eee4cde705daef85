// Package transport is Spindle's data-path protocol: length-prefixed frames
// over TCP, each a fixed prefix, a header in protobuf wire format and raw
// payload bytes (chunk data) that are never copied into the header. Client
// requests (WriteChunk, PutBlock, ReadChunk, GetBlock), their Responses and
// Raft messages between datanodes all travel as frames.
//
// It provides the frame codec (Encoder, Reader, Frame.Decode), the header
// messages (hand-written protobuf encoders and decoders over
// google.golang.org/protobuf/encoding/protowire, no generated code), a
// framed connection (Conn: one gathered write per frame, reused receive
// buffers), a pipelining client with a bounded in-flight window (Client)
// and a server helper with one goroutine per connection (Server).
//
// # Frame
//
// Integers in the prefix are little-endian, as in every Spindle format.
//
//	| offset | size | field                                              |
//	|--------|------|----------------------------------------------------|
//	| 0      | 2    | magic "SW" (0x53 0x57)                             |
//	| 2      | 1    | version = 1                                        |
//	| 3      | 1    | message type (MsgType), 1..6                       |
//	| 4      | 4    | header length h, bytes, u32, ≤ MaxHeaderBytes      |
//	| 8      | 4    | payload length p, bytes, u32, ≤ MaxPayloadBytes    |
//	| 12     | h    | header: one protobuf message, per the type         |
//	| 12+h   | p    | payload: raw bytes                                 |
//
// Message types:
//
//	| type | name        | header      | payload                                   |
//	|------|-------------|-------------|-------------------------------------------|
//	| 1    | WriteChunk  | WriteChunk  | the chunk bytes, exactly length of them   |
//	| 2    | PutBlock    | PutBlock    | none                                      |
//	| 3    | ReadChunk   | ReadChunk   | none                                      |
//	| 4    | GetBlock    | GetBlock    | none                                      |
//	| 5    | Response    | Response    | the data read (ReadChunk), else none      |
//	| 6    | RaftMessage | RaftMessage | chunk segments, end to end                |
//
// Headers (proto3 field numbers; every repeated scalar is packed):
//
//	WriteChunk  { uint64 request_id = 1; uint64 pipeline_id = 2;
//	              uint64 container_id = 3; uint64 local_id = 4;
//	              uint64 offset = 5; uint64 length = 6;
//	              uint32 bytes_per_checksum = 7; repeated fixed32 checksums = 8; bytes token = 9; }
//	PutBlock    { uint64 request_id = 1; uint64 pipeline_id = 2; BlockData block = 3; bytes token = 4; }
//	BlockData   { uint64 container_id = 1; uint64 local_id = 2; uint64 length = 3;
//	              uint32 bytes_per_checksum = 4; repeated ChunkInfo chunks = 5; }
//	ChunkInfo   { uint64 offset = 1; uint64 length = 2; repeated fixed32 checksums = 3; }
//	ReadChunk   { uint64 request_id = 1; uint64 pipeline_id = 2;
//	              uint64 container_id = 3; uint64 local_id = 4;
//	              uint64 offset = 5; uint64 length = 6; bytes token = 7; }
//	GetBlock    { uint64 request_id = 1; uint64 pipeline_id = 2;
//	              uint64 container_id = 3; uint64 local_id = 4; bytes token = 5; }
//	Response    { uint64 request_id = 1; uint32 status = 2; string message = 3;
//	              string leader = 4; BlockData block = 5; uint64 offset = 6;
//	              uint32 bytes_per_checksum = 7; repeated fixed32 checksums = 8; }
//	RaftMessage { uint64 group_id = 1; raftpb.Message message = 2;
//	              repeated uint64 payload_lengths = 3; }
//
// A RaftMessage carries one go.etcd.io/raft/v3 raftpb.Message, marshalled
// by the protobuf runtime straight into the header buffer. Its entries hold
// WriteChunk headers only; the chunk bytes of all of them are the frame's
// payload, segment after segment, payload_lengths[i] bytes each, in the
// order of the WriteChunk records in the entries (entry order, then order
// within an entry), adding up to the payload length. The raft message may
// not carry the responses field (14): it is local to a node. The Raft
// layer keeps a message within MaxHeaderBytes and MaxPayloadBytes (its
// MaxSizePerMsg counts entry headers, not chunk bytes).
//
// Checksums (CRC32C per bytes_per_checksum piece) travel with the data and
// are verified by the engine against the bytes, end to end; the frame
// itself has no checksum (TCP's, and the strict decoders, guard the rest).
//
// # Invariants
//
//   - Every length read from the wire is checked against its limit before
//     anything is allocated for it: a prefix's lengths against
//     MaxHeaderBytes and MaxPayloadBytes; a repeated field is counted in
//     the header bytes that hold it and allocated once. A Reader holds at
//     most its read buffer, one header buffer (≤ MaxHeaderBytes) and one
//     payload buffer (≤ MaxPayloadBytes). Decoding a hostile header of
//     MaxHeaderBytes allocates at most ~21 MiB (20×: a block of empty
//     chunks; the raft message's decode is bounded by MaxRaftEntries and
//     by refusing its local-only responses field).
//   - A corrupt or hostile frame is an error wrapping ErrBadFrame, never a
//     panic: bad magic or version, type 0 or unknown, a length over its
//     limit, a payload on a type without one, a header that does not
//     decode (truncated, wrong wire type, uint32 overflow), a payload that
//     does not match its header. The connection must then be closed (the
//     Reader's error is sticky; Client and Server close it).
//   - Payload bytes are never copied into a header or between buffers on
//     send: a frame is one gathered write of [prefix+header, payload…]
//     (writev on a *net.TCPConn). Over TLS (ConnConfig.TLS, mutual TLS
//     1.3) small frames are copied into one TLSWriteBufferBytes (64 KiB)
//     buffer flushed per batch (larger payloads written straight through),
//     and each batch's 16 KiB records are gathered beneath crypto/tls
//     (tlsconf.RecordConn) into one write per tlsconf.MaxBatchBytes (1 MiB).
//     On receive they are copied only out of the read buffer's look-ahead;
//     the rest goes from the socket (over TLS: from crypto/tls, reading
//     through a TLSReadBufferBytes buffer) straight into the payload buffer.
//   - No allocation per frame in steady state on send (the prefix and
//     header buffer and the iovec slice are reused) or on receive (header
//     and payload buffers are reused; larger payloads come from a pool).
//     NewPayload (a server's PayloadAlloc hands its buffers to handlers
//     that keep them) reuses a buffer only after the garbage collector
//     found it unreferenced (a finalizer files it on a free list).
//   - Decoders accept any protobuf encoding (any field order, unknown
//     fields skipped, packed or unpacked repeated scalars); encoders write
//     the canonical one (field order, zero scalars omitted, packed), to
//     which any accepted header re-encodes to bytes of the same value.
//
// # Limits
//
//	| name                      | value               | bounds                                    |
//	|---------------------------|---------------------|-------------------------------------------|
//	| MaxHeaderBytes            | 1 MiB               | a frame's header                          |
//	| MaxPayloadBytes           | 68 MiB (64 + 4)     | a frame's payload (one 64 MiB chunk + slack) |
//	| MaxRaftEntries            | 65,536              | entries of one RaftMessage                |
//	| DefaultReadBufferBytes    | 64 KiB              | Reader's look-ahead ([4 KiB, 16 MiB])     |
//	| DefaultRetainPayloadBytes | 4 MiB               | payload buffer a Reader keeps             |
//	| DefaultWriteTimeout       | 30 s                | one frame write                           |
//	| DefaultIdleTimeout        | 5 min               | a reader's wait for the next frame        |
//	| DefaultReadTimeout        | 30 s                | a wait for more bytes of a begun frame    |
//	| DefaultWindow             | 64 (max 4096)       | a Client's outstanding requests           |
//	| DefaultRequestTimeout     | 30 s                | a Call whose context has no deadline      |
//	| DefaultMaxConns           | 1024                | a Server's connections                    |
//	| DefaultSkipBytesPerSecond | 32 MiB/s            | a connection's skipped payloads, past a MaxPayloadBytes burst |
//	| CheckStepBytes            | 256 KiB             | a checked payload's read-and-check step (whole pieces) |
//
// # Concurrency
//
// Every read of a Conn (or a Reader on a net.Conn) is bounded: the wait
// for a frame by the idle timeout (ErrIdle), for more bytes of a begun one
// by the read timeout (refreshed as bytes arrive); a Server closes a
// connection that times out. A Server admits a
// frame's payload (ServerConfig.PayloadAlloc) before reading or
// allocating it, or skips it (ErrSkipPayload: read through and dropped,
// paced per connection: SkipBytesPerSecond). An admitted payload may come with a PayloadCheck,
// called as the payload arrives, a step of whole pieces (≤ CheckStepBytes)
// at a time, before the Handler; its first error stops the read, gives
// the admission and the buffer back and skips the rest (paced alike); the
// Handler then gets the frame with Frame.CheckErr set (see PayloadCheck).
//
// A Conn's reads (ReadHeader, ReadPayload, ReadFrame) come from one
// goroutine at a time; its writes (Send, SendBatch) may come from any
// number of goroutines and are serialised by a mutex, each frame (or
// batch) one gathered write, never interleaved. A write error or timeout
// breaks the connection for good. Frames and headers returned by a Reader
// alias its buffers until the next read (see Reader); decoded messages do
// not alias the frame, but for their block tokens (Token: a bytes field
// decoded in place, valid while the frame is, for the handler to check).
//
// A Client has one reader goroutine and one writer goroutine; each Call
// queues its request (everything queued meanwhile goes out in one gathered
// write) and waits for its Response by request ID, so callers pipeline up
// to the window. Requests leave in the order they were queued (CallQueued
// says when: how callers on several goroutines order them, as the key
// client orders a block's chunks). A Server runs one goroutine per
// connection, which reads a frame, calls the Handler and writes its reply,
// in the order frames were sent; a Handler may reply later from another
// goroutine (Conn.Send), or at once from Conn.Scratch (a pooled buffer the
// Server takes back after the reply: ReadChunk's bytes, no allocation).
package transport
