package bulk

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Erasure-coded shards (issue 37, docs/FORMAT.md §16.3): a converter
// stores each shard on its datanode (OpPutShard) and readers read ranges
// of them (OpReadShard), on the same address and with the same 24-byte
// request as an export: op 2 or 3, token length 0, the container, the
// shard's index in byte 16, its generation in bytes 17..19 (u24 LE; 0, the
// conversion's, is all an older build accepts).
//
// OpPutShard: then size u64 | zero u32 | CRC32C u32 of those 12 bytes,
// then the shard's size bytes; the answer (a status header) comes once the
// node verified the whole shard (its header and every 16 KiB against its
// checksum table) and made it durable (fsynced, renamed, directory
// fsynced). The shard's bytes go from the converter's file to the socket
// by sendfile (plaintext).
//
// OpReadShard: then any number of range requests, offset u64 | length u32
// | CRC32C u32 of those 12 bytes (length ≤ MaxShardRead), each answered by
// a status header and, on OK, exactly length bytes; the connection stays
// open for the next until the client closes it (or ShardIdleTimeout).
const (
	OpPutShard  byte = 2
	OpReadShard byte = 3
	// MaxShardBytes bounds a shard's size.
	MaxShardBytes = 1 << 40
	// MaxGeneration bounds a shard's generation (3 bytes of a request).
	MaxGeneration = 1<<24 - 1
	// MaxShardRead bounds one range of a shard read.
	MaxShardRead = 32 << 20
	// ShardIdleTimeout closes a shard read connection idle that long.
	ShardIdleTimeout = time.Minute
	// ShardPutTimeout bounds the receipt of one shard.
	ShardPutTimeout = 30 * time.Minute
)

// ShardStore keeps a datanode's shards.
type ShardStore interface {
	// Put stores shard index of generation gen of container, size bytes
	// read from r, once verified and durable; an error leaves nothing
	// behind.
	Put(container uint64, gen uint32, index int, size int64, r io.Reader) error
	// Open opens a stored shard (an error wrapping engine.ErrNotFound:
	// none).
	Open(container uint64, gen uint32, index int) (ShardFile, error)
}

// ShardFile is a stored shard open for reading.
type ShardFile interface {
	io.ReaderAt
	io.Closer
}

// ShardReadRoles may read shards over TLS: datanodes (conversions,
// reconstructions), clients and gateways (reads of EC containers) and
// administrators. Only datanodes may store them.
var ShardReadRoles = []tlsconf.Role{tlsconf.RoleDatanode, tlsconf.RoleClient, tlsconf.RoleS3, tlsconf.RoleAdmin}

func shardRequest(op byte, container uint64, gen uint32, index int) []byte {
	b := make([]byte, requestBytes)
	b[0], b[1], b[2], b[3] = Magic0, Magic1, Version, op
	binary.LittleEndian.PutUint64(b[8:], container)
	b[16], b[17], b[18], b[19] = byte(index), byte(gen), byte(gen>>8), byte(gen>>16)
	binary.LittleEndian.PutUint32(b[20:], engine.CRC32C(b[:20]))
	return b
}

func decodeShardRequest(b []byte) (op byte, container uint64, gen uint32, index int, err error) {
	if b[0] != Magic0 || b[1] != Magic1 || b[2] != Version {
		return 0, 0, 0, 0, fmt.Errorf("%w: bad magic or version %q", ErrProtocol, b[:3])
	}
	if got, want := binary.LittleEndian.Uint32(b[20:]), engine.CRC32C(b[:20]); got != want {
		return 0, 0, 0, 0, fmt.Errorf("%w: request CRC %08x, want %08x", ErrProtocol, got, want)
	}
	container = binary.LittleEndian.Uint64(b[8:])
	if container == 0 || binary.LittleEndian.Uint32(b[4:]) != 0 {
		return 0, 0, 0, 0, fmt.Errorf("%w: shard request: container 0 or a token", ErrProtocol)
	}
	return b[3], container, uint32(b[17]) | uint32(b[18])<<8 | uint32(b[19])<<16, int(b[16]), nil
}

// sub12 is a 16-byte sub-request: a u64, a u32 and the CRC32C of both.
func sub12(a uint64, b uint32) []byte {
	s := binary.LittleEndian.AppendUint64(nil, a)
	s = binary.LittleEndian.AppendUint32(s, b)
	return binary.LittleEndian.AppendUint32(s, engine.CRC32C(s))
}

func readSub12(r io.Reader) (uint64, uint32, error) {
	var s [16]byte
	if _, err := io.ReadFull(r, s[:]); err != nil {
		return 0, 0, err
	}
	if got, want := binary.LittleEndian.Uint32(s[12:]), engine.CRC32C(s[:12]); got != want {
		return 0, 0, fmt.Errorf("%w: shard sub-request CRC %08x, want %08x", ErrProtocol, got, want)
	}
	return binary.LittleEndian.Uint64(s[:]), binary.LittleEndian.Uint32(s[8:]), nil
}

// serveShard serves an OpPutShard or OpReadShard request (rb: its 24
// bytes).
func (s *Server) serveShard(conn net.Conn, w *bufio.Writer, rb []byte) error {
	op, container, gen, index, err := decodeShardRequest(rb)
	if err != nil || s.Shards == nil {
		if err == nil {
			err = fmt.Errorf("this node keeps no shards")
		}
		return s.refuse(w, StatusBadReq, err.Error())
	}
	p, err := tlsconf.PeerOfConn(conn)
	if err == nil && p.Authenticated() && !(op == OpPutShard && p.Is(tlsconf.RoleDatanode) || op == OpReadShard && p.Is(ShardReadRoles...)) {
		err = fmt.Errorf("certificate %s may not %s shards", p, map[bool]string{true: "store", false: "read"}[op == OpPutShard])
	}
	if err != nil {
		return s.refuse(w, StatusError, "forbidden: "+err.Error())
	}
	switch op {
	case OpPutShard:
		if err := conn.SetDeadline(time.Now().Add(ShardPutTimeout)); err != nil {
			return err
		}
		size, _, err := readSub12(conn)
		if err != nil || size > MaxShardBytes {
			return s.refuse(w, StatusBadReq, fmt.Sprintf("shard size: %v (%d bytes)", err, size))
		}
		if err := s.Shards.Put(container, gen, index, int64(size), io.LimitReader(conn, int64(size))); err != nil {
			return s.refuse(w, StatusError, err.Error())
		}
		w.Write(appendStatus(nil, StatusOK, ""))
		return w.Flush()
	case OpReadShard:
		f, err := s.Shards.Open(container, gen, index)
		if err != nil {
			return s.refuse(w, StatusNotFound, err.Error())
		}
		defer closeQuietly(f)
		buf := make([]byte, 0, 1<<20)
		for {
			if err := conn.SetDeadline(time.Now().Add(ShardIdleTimeout)); err != nil {
				return err
			}
			off, n, err := readSub12(conn)
			if err == io.EOF {
				return nil
			}
			if err != nil || n > MaxShardRead {
				return s.refuse(w, StatusBadReq, fmt.Sprintf("shard range: %v (%d bytes)", err, n))
			}
			if cap(buf) < int(n) {
				buf = make([]byte, n)
			}
			b := buf[:n]
			if _, err := f.ReadAt(b, int64(off)); err != nil {
				if err := s.refuse(w, StatusError, fmt.Sprintf("read %d bytes at %d of shard %d of container %d: %v", n, off, index, container, err)); err != nil {
					return err
				}
				continue
			}
			w.Write(appendStatus(nil, StatusOK, ""))
			if _, err := w.Write(b); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	return s.refuse(w, StatusBadReq, fmt.Sprintf("unknown op %d", op))
}

// PutShard stores shard index of container (its generation 0), the size
// bytes of src, on the datanode at addr, and returns once that node has
// it verified and durable. An *os.File goes by sendfile over plaintext.
func PutShard(ctx context.Context, sec *tlsconf.Settings, addr string, container uint64, index int, src io.Reader, size int64) error {
	return PutShardGeneration(ctx, sec, addr, container, 0, index, src, size)
}

// PutShardGeneration is PutShard of a shard of generation gen (≤
// MaxGeneration).
func PutShardGeneration(ctx context.Context, sec *tlsconf.Settings, addr string, container uint64, gen uint32, index int, src io.Reader, size int64) error {
	if gen > MaxGeneration {
		return fmt.Errorf("bulk: put shard %d of container %d: generation %d over %d", index, container, gen, MaxGeneration)
	}
	conn, err := dial(ctx, sec, addr, false)
	if err != nil {
		return err
	}
	defer closeQuietly(conn)
	stop := context.AfterFunc(ctx, func() { closeQuietly(conn) })
	defer stop()
	TuneSender(conn)
	if _, err := conn.Write(append(shardRequest(OpPutShard, container, gen, index), sub12(uint64(size), 0)...)); err != nil {
		return fmt.Errorf("bulk: put shard %d of container %d on %s: %w", index, container, addr, err)
	}
	if n, err := io.Copy(conn, io.LimitReader(src, size)); err != nil || n != size {
		if serr := readStatus(conn); errors.Is(serr, ErrRemote) { // refused before the bytes: say why
			return fmt.Errorf("bulk: put shard %d of container %d on %s: %w", index, container, addr, serr)
		}
		return fmt.Errorf("bulk: put shard %d of container %d on %s: %d of %d bytes sent: %v", index, container, addr, n, size, err)
	}
	if err := readStatus(conn); err != nil {
		return fmt.Errorf("bulk: put shard %d of container %d on %s: %w", index, container, addr, err)
	}
	return nil
}

// ShardReader reads a remote shard (io.ReaderAt) over one connection,
// opened at the first read and again after an error; safe for concurrent
// use (one range at a time).
type ShardReader struct {
	Sec       *tlsconf.Settings
	Addr      string
	Container uint64
	// Generation is the shard's (0: its conversion's).
	Generation uint32
	Index      int
	// Timeout bounds each read (dial included); 0: 30 s.
	Timeout time.Duration

	mu   sync.Mutex
	conn net.Conn
	br   *bufio.Reader
}

// ReadAt reads len(p) bytes of the shard at off.
func (r *ShardReader) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := 0
	for done < len(p) {
		n := min(len(p)-done, MaxShardRead)
		if err := r.readLocked(p[done:done+n], off+int64(done)); err != nil {
			r.closeLocked()
			return done, fmt.Errorf("bulk: read %d bytes at %d of shard %d of container %d on %s: %w", n, off+int64(done), r.Index, r.Container, r.Addr, err)
		}
		done += n
	}
	return done, nil
}

func (r *ShardReader) readLocked(p []byte, off int64) error {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if r.conn == nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		conn, err := dial(ctx, r.Sec, r.Addr, false)
		cancel()
		if err != nil {
			return err
		}
		if _, err := conn.Write(shardRequest(OpReadShard, r.Container, r.Generation, r.Index)); err != nil {
			closeQuietly(conn)
			return err
		}
		r.conn, r.br = conn, bufio.NewReaderSize(conn, 64<<10)
	}
	if err := r.conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := r.conn.Write(sub12(uint64(off), uint32(len(p)))); err != nil {
		return err
	}
	if err := readStatus(r.br); err != nil {
		return err
	}
	_, err := io.ReadFull(r.br, p)
	return noEOF(err)
}

func (r *ShardReader) closeLocked() {
	if r.conn != nil {
		closeQuietly(r.conn)
		r.conn, r.br = nil, nil
	}
}

// Close closes the connection.
func (r *ShardReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeLocked()
	return nil
}
