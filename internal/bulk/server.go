package bulk

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/spindle-store/spindle/internal/blocktoken"
	"golang.org/x/sys/unix"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spindle-store/spindle/internal/engine"
	"github.com/spindle-store/spindle/internal/tlsconf"
	"github.com/spindle-store/spindle/internal/vfs"
)

// Defaults and limits of a Server.
const (
	// DefaultMaxExports bounds the exports a node serves at once; more get
	// StatusBusy (the target tries another source).
	DefaultMaxExports = 8
	// RequestTimeout bounds the wait for a request's bytes.
	RequestTimeout = 10 * time.Second
	// MinWriteTimeout and MinRateBytesPerS set a write deadline per block:
	// MinWriteTimeout plus the block's length at MinRateBytesPerS. A target
	// that stops reading is dropped after that.
	MinWriteTimeout  = 30 * time.Second
	MinRateBytesPerS = 1 << 20
	// SocketBufBytes sizes both ends' socket buffers (SO_SNDBUF at the
	// source, SO_RCVBUF at the target; the kernel caps it at
	// net.core.[rw]mem_max): a copy is one connection per container, and a
	// fresh connection's autotuned buffers start at 16 KiB (send) and 128
	// KiB (receive), so every copy would begin with many small wakeups.
	SocketBufBytes = 4 << 20
	// rcvLowatBytes: a fetch's socket reads as readable only once this
	// much has arrived (or the source closed), so that the target wakes
	// once per 256 KiB rather than per segment. Safe because a source
	// never waits for the target mid-response and closes after it.
	rcvLowatBytes = 256 << 10
	// headerBufBytes is the buffer of small writes (status, records); the
	// block bytes bypass it (sendfile).
	headerBufBytes = 64 << 10
	// tlsCopyBufBytes is the buffer a TLS source reads block files into
	// and encrypts from (no sendfile): 16 TLS records per file read and
	// per write to crypto/tls.
	tlsCopyBufBytes = 256 << 10
)

// ServerStats counts what a Server did.
type ServerStats struct {
	Exports       uint64 // exports completed
	ExportsFailed uint64 // exports started and not completed
	Refused       uint64 // requests refused (busy, not found, not closed, bad)
	Bytes         uint64 // block bytes sent
	Active        int64  // exports in progress
	Sendfile      bool   // the last block went out by sendfile (OS files, plaintext TCP) rather than read+write (TLS: read, encrypt, write)
}

// Server serves whole-container reads from an engine.
type Server struct {
	// Tokens, when set before the first Handle, checks export tokens
	// (authorizeExport); nil: none needed.
	Tokens *blocktoken.Verifier
	// Shards, when set before the first Handle, keeps this node's
	// erasure-coded shards (shard.go: OpPutShard, OpReadShard).
	Shards ShardStore

	eng  *engine.Engine
	log  *slog.Logger
	sema chan struct{}

	exports, failed, refused, bytes atomic.Uint64
	active                          atomic.Int64
	sendfile                        atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewServer returns a Server over eng; maxExports ≤ 0 means
// DefaultMaxExports.
func NewServer(eng *engine.Engine, maxExports int, log *slog.Logger) *Server {
	if maxExports <= 0 {
		maxExports = DefaultMaxExports
	}
	if log == nil {
		log = slog.Default()
	}
	return &Server{eng: eng, log: log, sema: make(chan struct{}, maxExports), conns: map[net.Conn]struct{}{}}
}

// Stats returns the counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{Exports: s.exports.Load(), ExportsFailed: s.failed.Load(), Refused: s.refused.Load(),
		Bytes: s.bytes.Load(), Active: s.active.Load(), Sendfile: s.sendfile.Load()}
}

// Handle serves one connection (one request) in a new goroutine and closes
// it. After Close it closes conn at once.
func (s *Server) Handle(conn net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		closeQuietly(conn)
		return
	}
	s.conns[conn] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
			closeQuietly(conn)
		}()
		if err := s.serve(conn); err != nil {
			s.log.Warn("bulk: export failed", "remote", conn.RemoteAddr().String(), "err", err)
		}
	}()
}

// Close closes every connection being served and waits for their
// goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		closeQuietly(c)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) refuse(w *bufio.Writer, status byte, msg string) error {
	s.refused.Add(1)
	w.Write(appendStatus(nil, status, msg))
	return w.Flush()
}

// ExportRoles may fetch containers over TLS: datanodes (re-replication)
// and administrators.
var ExportRoles = []tlsconf.Role{tlsconf.RoleDatanode, tlsconf.RoleAdmin}

// authorizeExport says whether conn's peer may fetch a container: over
// TLS its verified certificate's role must be one of ExportRoles and, with
// Server.Tokens, token an export token for the container minted for that
// certificate (the meta service names the copy's target so, in its
// replicate_container command); over plaintext (--insecure) nobody is
// authenticated and everybody may.
func (s *Server) authorizeExport(conn net.Conn, container uint64, token []byte) error {
	p, err := tlsconf.PeerOfConn(conn)
	if err != nil {
		return fmt.Errorf("forbidden: %w", err)
	}
	if p.Authenticated() && !p.Is(ExportRoles...) {
		return fmt.Errorf("forbidden: certificate %s may not fetch containers (roles %v may)", p, ExportRoles)
	}
	if p.Authenticated() && s.Tokens != nil {
		if err := s.Tokens.Check(token, container, 0, blocktoken.OpExport, p.Name); err != nil {
			return fmt.Errorf("certificate %s is not the target the meta service named for container %d: %w", p, container, err)
		}
	}
	return nil
}

func (s *Server) serve(conn net.Conn) error {
	TuneSender(conn)
	if err := conn.SetReadDeadline(time.Now().Add(RequestTimeout)); err != nil {
		return fmt.Errorf("setting the request deadline: %w", err)
	}
	var rb [requestBytes]byte
	w := bufio.NewWriterSize(conn, headerBufBytes)
	if err := conn.SetWriteDeadline(time.Now().Add(MinWriteTimeout)); err != nil {
		return fmt.Errorf("setting the reply deadline: %w", err)
	}
	if _, err := io.ReadFull(conn, rb[:]); err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	if rb[3] == OpPutShard || rb[3] == OpReadShard {
		return s.serveShard(conn, w, rb[:])
	}
	req, err := decodeRequest(rb[:])
	if err != nil {
		return s.refuse(w, StatusBadReq, err.Error())
	}
	token := make([]byte, req.tokenLen)
	if _, err := io.ReadFull(conn, token); err != nil {
		return fmt.Errorf("reading the request's token: %w", err)
	}
	if err := s.authorizeExport(conn, req.container, token); err != nil {
		s.log.Warn("bulk: export refused", "remote", conn.RemoteAddr().String(), "container", req.container, "err", err)
		return s.refuse(w, StatusError, err.Error())
	}
	select {
	case s.sema <- struct{}{}:
		defer func() { <-s.sema }()
	default:
		return s.refuse(w, StatusBusy, fmt.Sprintf("%d exports in progress", cap(s.sema)))
	}
	x, err := s.eng.ExportContainer(engine.ContainerID(req.container))
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return s.refuse(w, StatusNotFound, err.Error())
	case errors.Is(err, engine.ErrNotClosed):
		return s.refuse(w, StatusNotClosed, err.Error())
	case err != nil:
		return s.refuse(w, StatusError, err.Error())
	}
	defer closeQuietly(x)
	s.active.Add(1)
	defer s.active.Add(-1)
	start := time.Now()
	blocks, n, err := s.stream(conn, w, x)
	if err != nil {
		s.failed.Add(1)
		return fmt.Errorf("container %d after %d blocks, %d bytes: %w", req.container, blocks, n, err)
	}
	s.exports.Add(1)
	secs := time.Since(start).Seconds()
	s.log.Info("bulk: container exported", "container", req.container, "remote", conn.RemoteAddr().String(),
		"blocks", blocks, "bytes", n, "seconds", fmt.Sprintf("%.3f", secs), "mb_per_s", fmt.Sprintf("%.0f", float64(n)/1e6/max(secs, 1e-9)))
	return nil
}

// stream writes the OK status, the container header, every block and the
// end record. Block bytes go from the block file to the connection by
// io.Copy of an *os.File (inside an io.LimitedReader) to the *net.TCPConn,
// which Go turns into sendfile(2): no copy through user space. Over TLS
// (a tlsconf.RecordConn beneath crypto/tls) they are read tlsCopyBufBytes
// at a time, encrypted, and the whole stream is one record batch: written
// tlsconf.MaxBatchBytes per write syscall instead of one per 16 KiB record,
// the rest at its end.
func (s *Server) stream(conn net.Conn, w *bufio.Writer, x *engine.Export) (blocks, n uint64, err error) {
	var copyBuf []byte
	if rc := tlsconf.RecordConnOf(conn); rc != nil {
		copyBuf = make([]byte, tlsCopyBufBytes)
		rc.BeginBatch()
		defer func() {
			if ferr := rc.FlushBatch(); err == nil {
				err = ferr
			}
		}()
	}
	info := x.Info()
	b := appendStatus(nil, StatusOK, "")
	b = ContainerHeader{MaxSizeBytes: info.MaxSizeBytes, UsedBytes: info.UsedBytes, BCSID: info.BCSID}.appendTo(b)
	w.Write(b)
	for {
		bd, f, err := x.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return blocks, n, err
		}
		if blockRecordSize(bd) > MaxBlockRecordBytes {
			closeQuietly(f)
			return blocks, n, fmt.Errorf("block %d: record of %d bytes over the wire limit %d", bd.ID.Local, blockRecordSize(bd), MaxBlockRecordBytes)
		}
		b = appendBlockRecord(b[:0], bd)
		if err := conn.SetWriteDeadline(time.Now().Add(MinWriteTimeout + time.Duration(bd.Length/MinRateBytesPerS)*time.Second)); err != nil {
			closeQuietly(f)
			return blocks, n, err
		}
		if _, err := w.Write(b); err != nil {
			closeQuietly(f)
			return blocks, n, err
		}
		if err := w.Flush(); err != nil {
			closeQuietly(f)
			return blocks, n, err
		}
		var src io.Reader = f
		of, ok := vfs.OSFile(f)
		if ok {
			src = of
		}
		_, tcp := conn.(*net.TCPConn)
		s.sendfile.Store(ok && tcp) // TLS: read, encrypt, write instead
		// io.Copy to the connection itself (not a wrapper): *net.TCPConn's
		// ReadFrom recognises *io.LimitedReader over *os.File. (TLS: no
		// ReadFrom, so io.CopyBuffer uses copyBuf.)
		c, err := io.CopyBuffer(conn, &io.LimitedReader{R: src, N: int64(bd.Length)}, copyBuf)
		closeQuietly(f)
		n += uint64(c)
		s.bytes.Add(uint64(c))
		if err != nil {
			return blocks, n, err
		}
		if uint64(c) != bd.Length {
			return blocks, n, fmt.Errorf("block %d: file ended after %d of %d bytes: %w", bd.ID.Local, c, bd.Length, engine.ErrCorrupt)
		}
		blocks++
	}
	b = appendEnd(b[:0], blocks, n)
	if _, err := w.Write(b); err != nil {
		return blocks, n, err
	}
	return blocks, n, w.Flush()
}

// Sink receives a container's blocks: *engine.Importer implements it.
type Sink interface {
	AddBlock(bd *engine.BlockData, r io.Reader) error
}

// FetchResult describes a completed fetch.
type FetchResult struct {
	Blocks, Bytes uint64
	MaxSizeBytes  uint64
	BCSID         uint64 // the container's, as the source's header said
	Seconds       float64
}

// Dial connects to a source (with TLS when sec says so; nil: plaintext);
// the dialer and the handshake honour ctx.
func Dial(ctx context.Context, sec *tlsconf.Settings, addr string) (net.Conn, error) {
	return dial(ctx, sec, addr, true)
}

// dial is Dial; tune: TuneReceiver (not for a connection of small
// answers awaited one by one, such as shard reads: SO_RCVLOWAT would hold
// each until the read deadline).
func dial(ctx context.Context, sec *tlsconf.Settings, addr string, tune bool) (net.Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bulk: dial %s: %w", addr, err)
	}
	// The handshake first: with SO_RCVLOWAT at 256 KiB the poller would
	// not wake the client for the server's few KiB of handshake, which
	// would then wait for the server to give up (a race: TestCopyOverTLS
	// and copies by the hundred pass or hang by timing).
	c, err := sec.Pin(tlsconf.RoleDatanode).Client(ctx, raw, addr) // datanodes only (issue 33)
	if err != nil {
		return nil, fmt.Errorf("bulk: %w", err)
	}
	if !tune {
		return c, nil
	}
	TuneReceiver(raw)
	if rc := tlsconf.RecordConnOf(c); rc != nil {
		// crypto/tls reads about one 16 KiB record per read: through
		// this buffer one read syscall brings in every record that
		// arrived.
		rc.BufferReads(fetchBufBytes)
	}
	return c, nil
}

// TuneSender sets the socket options of a source's connection
// (SO_SNDBUF = SocketBufBytes; over TLS on the TCP connection beneath
// crypto/tls's tlsconf.RecordConn); TuneReceiver those of a target's
// (SO_RCVBUF = SocketBufBytes, SO_RCVLOWAT = 256 KiB). Connections that
// are not TCP are left alone. The copy limit's loopback measurement
// (bench.MeasureCopyLimits) tunes its connection with the same two, so
// that it measures the network as the copies use it.
func TuneSender(c net.Conn) {
	if rc := tlsconf.RecordConnOf(c); rc != nil {
		c = rc.Conn
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(SocketBufBytes) // tuning only: the defaults work, slower
	}
}

// TuneReceiver: see TuneSender.
func TuneReceiver(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		// Tuning only, errors dropped: the defaults work, slower.
		_ = tc.SetReadBuffer(SocketBufBytes)
		if raw, err := tc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, rcvLowatBytes) })
		}
	}
}

// Fetch asks the node at addr for container id and hands every block to
// sink (which verifies and stores it). begin is called with the source's
// container header before the first block (it may create the sink); it may
// be nil when sink is given. The stream is complete only once the end
// record matched the blocks and bytes received; any other outcome is an
// error and the caller must discard what the sink holds. ctx cancels it
// (the connection is closed).
func Fetch(ctx context.Context, sec *tlsconf.Settings, addr string, id uint64, begin func(ContainerHeader) (Sink, error)) (FetchResult, error) {
	return FetchWithToken(ctx, sec, addr, id, "", begin)
}

// FetchWithToken is Fetch presenting an export token (package blocktoken:
// the replicate_container command's, naming this node as the target).
func FetchWithToken(ctx context.Context, sec *tlsconf.Settings, addr string, id uint64, token string, begin func(ContainerHeader) (Sink, error)) (FetchResult, error) {
	var res FetchResult
	start := time.Now()
	conn, err := Dial(ctx, sec, addr)
	if err != nil {
		return res, err
	}
	defer closeQuietly(conn)
	stop := context.AfterFunc(ctx, func() { closeQuietly(conn) })
	defer stop()
	res, err = fetch(conn, request{op: OpExportContainer, container: id, token: token}, begin)
	res.Seconds = time.Since(start).Seconds()
	switch {
	case err != nil && ctx.Err() != nil:
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	case ctx.Err() != nil:
		// Cancelled while the last bytes were already buffered: the caller
		// gave up, so the copy must not be committed.
		err = ctx.Err()
	}
	if err != nil {
		return res, fmt.Errorf("bulk: fetch container %d from %s: %w", id, addr, err)
	}
	return res, nil
}

// directReader reads what br has buffered, then from conn directly.
type directReader struct {
	br   *bufio.Reader
	conn net.Conn
}

func (d directReader) Read(p []byte) (int, error) {
	if d.br.Buffered() > 0 {
		return d.br.Read(p[:min(len(p), d.br.Buffered())])
	}
	return d.conn.Read(p)
}

// fetchBufBytes is the read buffer of a fetch: small reads (records) come
// from it, large ones (block bytes into the importer's 1 MiB buffer) go
// around it straight from the socket.
const fetchBufBytes = 256 << 10

func fetch(conn net.Conn, req request, begin func(ContainerHeader) (Sink, error)) (FetchResult, error) {
	var res FetchResult
	if _, err := conn.Write(req.encode()); err != nil {
		return res, err
	}
	r := bufio.NewReaderSize(conn, fetchBufBytes)
	if err := readStatus(r); err != nil {
		return res, err
	}
	h, err := readContainerHeader(r)
	if err != nil {
		return res, err
	}
	res.MaxSizeBytes, res.BCSID = h.MaxSizeBytes, h.BCSID
	sink, err := begin(h)
	if err != nil {
		return res, err
	}
	var lenBuf [5]byte
	var rec []byte
	// Block bytes: what the buffer holds already, then straight from the
	// socket into the sink's buffer (no second copy through r's buffer).
	lr := &io.LimitedReader{R: directReader{r, conn}}
	last := uint64(0)
	for {
		if _, err := io.ReadFull(r, lenBuf[:1]); err != nil {
			return res, noEOF(err)
		}
		switch lenBuf[0] {
		case tagEnd:
			var e [endRecordBytes]byte
			if _, err := io.ReadFull(r, e[:]); err != nil {
				return res, noEOF(err)
			}
			blocks, n, err := decodeEnd(e[:])
			if err != nil {
				return res, err
			}
			if blocks != res.Blocks || n != res.Bytes {
				return res, fmt.Errorf("%w: end record says %d blocks, %d bytes; received %d, %d", ErrProtocol, blocks, n, res.Blocks, res.Bytes)
			}
			return res, nil
		case tagBlock:
		default:
			return res, fmt.Errorf("%w: tag %q", ErrProtocol, lenBuf[0])
		}
		if _, err := io.ReadFull(r, lenBuf[1:]); err != nil {
			return res, noEOF(err)
		}
		n := uint32(lenBuf[1]) | uint32(lenBuf[2])<<8 | uint32(lenBuf[3])<<16 | uint32(lenBuf[4])<<24
		if n > MaxBlockRecordBytes {
			return res, fmt.Errorf("%w: block record of %d bytes over %d", ErrProtocol, n, MaxBlockRecordBytes)
		}
		if cap(rec) < int(n) {
			rec = make([]byte, n)
		}
		rec = rec[:n]
		if _, err := io.ReadFull(r, rec); err != nil {
			return res, noEOF(err)
		}
		bd, err := decodeBlockRecord(engine.ContainerID(req.container), rec)
		if err != nil {
			return res, err
		}
		if res.Blocks > 0 && bd.ID.Local <= last {
			return res, fmt.Errorf("%w: block %d after block %d", ErrProtocol, bd.ID.Local, last)
		}
		last = bd.ID.Local
		lr.N = int64(bd.Length)
		if err := sink.AddBlock(bd, lr); err != nil {
			return res, fmt.Errorf("block %d: %w", bd.ID.Local, noEOF(err))
		}
		if lr.N != 0 {
			return res, fmt.Errorf("block %d: the sink left %d bytes unread", bd.ID.Local, lr.N)
		}
		res.Blocks++
		res.Bytes += bd.Length
	}
}
