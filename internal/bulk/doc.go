// Package bulk streams whole CLOSED containers between datanodes (and to
// clients): the path of closed-container re-replication. The source sends
// every block file straight from the page cache to the socket with
// sendfile(2) — io.Copy of an *os.File to a *net.TCPConn (plaintext; see
// TLS below); no staging, no
// archive, no compression — and the target (engine.Importer) verifies every
// checksum against the block metadata as the bytes arrive, writes them into
// a staging directory and makes the container visible atomically once the
// stream ended well.
//
// A bulk stream shares the datanode's data-path address: Demux peeks at the
// first two bytes of each accepted connection ("SB" bulk, "SW" data path).
//
// With TLS (tlsconf.Settings), the address speaks mutual TLS 1.3 only:
// Demux completes each connection's handshake (within the first bytes
// timeout) before it reads the two bytes, and a connection that fails it
// is closed. Go's TLS has no kernel TLS, so the source's block bytes then
// go through user space (read into a 256 KiB buffer, encrypt, write)
// instead of sendfile; the stream's TLS records are gathered beneath
// crypto/tls (tlsconf.RecordConn: one write syscall per 1 MiB, not per
// 16 KiB record), and the target reads them through a 256 KiB buffer
// beneath crypto/tls. Stats.Sendfile says which path the last block took.
// Only a peer whose certificate has one of ExportRoles (datanode, admin)
// may fetch a container, and with Server.Tokens (a datanode run by the
// meta service) only with an export token for the container minted for
// its certificate (the copy's target, package blocktoken); any other gets
// status ERROR ("forbidden") and a log line.
//
// # Wire format (integers little-endian, CRC32C Castagnoli)
//
// Request, client → source, 24 bytes:
//
//	| offset | size | field                                   |
//	|--------|------|-----------------------------------------|
//	| 0      | 2    | magic "SB"                              |
//	| 2      | 1    | version = 2                             |
//	| 3      | 1    | op: 1 export container                  |
//	| 4      | 4    | token length t, u32 (≤ MaxTokenBytes)   |
//	| 8      | 8    | container ID (≠ 0)                      |
//	| 16     | 4    | reserved, 0                             |
//	| 20     | 4    | CRC32C of bytes 0..19                   |
//	| 24     | t    | export token (text; t = 0: none)        |
//
// Response, source → client: a status header, then on OK the container
// header, the blocks in ascending local ID order, and the end record.
//
//	status     | "SB" | version u8 | status u8 (0 OK, 1 NOT_FOUND, 2 NOT_CLOSED, 3 BUSY, 4 ERROR, 5 BAD_REQUEST) |
//	           | message length u32 (≤ 4096) | message bytes |
//	container  | max size u64 | used bytes u64 | BCSID u64 | CRC32C u32 of the 24 bytes |
//	block      | 'B' | record length L u32 (≤ 16 MiB) | record (L bytes) | block bytes (record's length) |
//	record     | local ID u64 | length u64 | bytes per checksum u32 | chunk count n u32 |
//	           | n × { chunk length u32 | ⌈length/bpc⌉ × CRC32C u32 } | CRC32C u32 of the record before it |
//	end        | 'E' | blocks u64 | bytes u64 | CRC32C u32 of the 16 bytes |
//
// A source that fails mid-stream closes the connection; a stream is complete
// only when the end record arrived and matches what was received.
//
// # Invariants
//
//   - Memory is bounded whatever the container size: the source holds one
//     block record at a time (block bytes never enter user space; over TLS
//     a 256 KiB copy buffer and at most tlsconf.MaxBatchBytes of records);
//     the target one read buffer (two over TLS) and the importer's buffer.
//   - Nothing the target received becomes visible unless every block
//     verified and the end record matched (the importer commits only then;
//     the caller aborts otherwise).
//   - Every length read from the wire is checked against its bound before
//     anything is allocated for it.
//
// # Concurrency
//
// A Server handles each connection in its own goroutine, at most
// MaxExports exports at once (more get BUSY); Close closes every
// connection and waits. Fetch runs in the caller's goroutine; its context
// closes the connection.
package bulk
