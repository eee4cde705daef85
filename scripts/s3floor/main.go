// Command s3floor measures the physical floor of an S3 object's bytes on
// this machine (issue 36 item 1): the CPU time of each thing a PUT or GET
// of one object must do at least, measured alone, with none of Spindle's
// code: a memory copy, a loopback TCP transfer (sender and receiver), the
// same over TLS 1.3, one AES-128-GCM pass (a TLS hop's encryption or
// decryption alone), a write into the page cache of a tmpfs file with
// fdatasync, CRC32C, and MD5 (crypto/md5, and md5batch's 16 lanes at once
// per object). It prints
// CPU µs per object for each --sizes (default 1MiB and 4KiB), from
// getrusage of this process (every thread) over -n objects (bounded: at
// most 2 s of wall time per line). The copies and checksums run over a
// rotating set of 64 MiB of buffers, so each object's bytes come from
// memory, not the cache, as a server's do.
//
//	go run ./scripts/s3floor [-dir /dev/shm] [-n 2000]
package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/md5"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/big"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/spindle-store/spindle/internal/md5batch"
)

const (
	poolBytes = 64 << 20
	maxWall   = 2 * time.Second
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs fn(i) up to n times (stopping after maxWall) and returns
// the process's CPU µs per call.
func measure(n int, fn func(i int) error) (float64, error) {
	c0, t0 := cpuNow(), time.Now()
	i := 0
	for ; i < n && time.Since(t0) < maxWall; i++ {
		if err := fn(i); err != nil {
			return 0, err
		}
	}
	return float64(cpuNow()-c0) / 1e3 / float64(i), nil
}

func pool(size int) [][]byte {
	bufs := make([][]byte, max(2, poolBytes/size))
	for i := range bufs {
		bufs[i] = make([]byte, size)
		for j := range bufs[i] {
			bufs[i][j] = byte(i + j)
		}
	}
	return bufs
}

func main() {
	dir := flag.String("dir", "/dev/shm", "directory of the page-cache writes (tmpfs: no device; a disk's: its sync)")
	n := flag.Int("n", 2000, "objects per line (at most 2 s each)")
	flag.Parse()
	fmt.Printf("# s3floor %s, %s, load %s", time.Now().UTC().Format(time.RFC3339), *dir, loadavg())
	for _, size := range []int{1 << 20, 4 << 10} {
		if err := run(size, *dir, *n); err != nil {
			fmt.Fprintln(os.Stderr, "s3floor:", err)
			os.Exit(1)
		}
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?\n"
	}
	return string(b)
}

func run(size int, dir string, n int) error {
	src, dst := pool(size), pool(size)
	div := 1.0 // objects per call of fn
	line := func(name string, fn func(i int) error) error {
		us, err := measure(n, fn)
		us /= div
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("%-8d %-44s %9.1f µs/object %8.2f CPU-s/GB\n", size, name, us, us*1e3/float64(size))
		return nil
	}
	if err := line("memcpy", func(i int) error { copy(dst[i%len(dst)], src[(i+7)%len(src)]); return nil }); err != nil {
		return err
	}
	if err := line("crc32c", func(i int) error { crc32.Checksum(src[i%len(src)], crc32.MakeTable(crc32.Castagnoli)); return nil }); err != nil {
		return err
	}
	if err := line("md5 (crypto/md5)", func(i int) error { md5.Sum(src[i%len(src)]); return nil }); err != nil {
		return err
	}
	b := md5batch.New()
	div = md5batch.Lanes
	if err := line("md5 (md5batch, 16 objects at once, per object)", func(i int) error {
		ds := make([]*md5batch.Digest, md5batch.Lanes)
		for l := range ds {
			ds[l] = b.NewDigest()
			ds[l].WriteAsync(src[(i*md5batch.Lanes+l)%len(src)])
		}
		for _, d := range ds {
			d.Sum(nil)
		}
		return nil
	}); err != nil {
		return err
	}
	div = 1
	f, err := os.CreateTemp(dir, "s3floor-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // best effort
	defer func() { _ = f.Close() }()           // best effort: read-only use after the writes
	const fileBytes = 256 << 20
	if err := line("pwrite into new tmpfs pages + fdatasync", func(i int) error {
		off := int64(i*size) % fileBytes
		if off == 0 {
			if err := f.Truncate(0); err != nil {
				return err
			}
		}
		if _, err := f.WriteAt(src[i%len(src)], off); err != nil {
			return err
		}
		return syscall.Fdatasync(int(f.Fd()))
	}); err != nil {
		return err
	}
	if err := gcm(size, src, dst, line); err != nil {
		return err
	}
	if err := loopback("loopback TCP: object sent, read, 1 byte back", size, src, line, nil); err != nil {
		return err
	}
	return loopback("loopback TLS 1.3: object sent, read, 1 byte back", size, src, line, tlsPair)
}

// gcm measures one pass of TLS 1.3's default cipher (AES-128-GCM, as Go
// picks it with AES-NI) over an object in 16 KiB records: what each TLS
// hop adds at each end, without the syscalls.
func gcm(size int, src, dst [][]byte, line func(string, func(int) error) error) error {
	key := make([]byte, 16)
	blk, err := aes.NewCipher(key)
	if err != nil {
		return err
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return err
	}
	nonce := make([]byte, aead.NonceSize())
	const record = 16 << 10
	out := make([]byte, 0, record+aead.Overhead())
	seal := func(i int) error {
		b := src[i%len(src)]
		for off := 0; off < len(b); off += record {
			out = aead.Seal(out[:0], nonce, b[off:min(off+record, len(b))], nil)
		}
		return nil
	}
	if err := line("AES-128-GCM seal, 16 KiB records (a TLS send)", seal); err != nil {
		return err
	}
	sealed := make([][]byte, 0, 64) // a few objects' records, opened in turn
	for i := 0; i < 4; i++ {
		b := src[i]
		for off := 0; off < len(b); off += record {
			sealed = append(sealed, aead.Seal(nil, nonce, b[off:min(off+record, len(b))], nil))
		}
	}
	perObject := (size + record - 1) / record
	return line("AES-128-GCM open, 16 KiB records (a TLS receive)", func(i int) error {
		d := dst[i%len(dst)][:0]
		for r := 0; r < perObject; r++ {
			var err error
			if d, err = aead.Open(d, nonce, sealed[(i*perObject+r)%len(sealed)], nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// tlsPair wraps a loopback connection's two ends in TLS 1.3 with a
// throw-away self-signed certificate (the handshake done before timing).
func tlsPair(client, server net.Conn) (net.Conn, net.Conn, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"s3floor"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	sc := tls.Server(server, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}}})
	cc := tls.Client(client, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "s3floor"})
	errs := make(chan error, 1)
	go func() { errs <- sc.Handshake() }()
	if err := cc.Handshake(); err != nil {
		return nil, nil, err
	}
	if err := <-errs; err != nil {
		return nil, nil, err
	}
	return cc, sc, nil
}

// loopback measures a TCP transfer of one object over 127.0.0.1, both ends
// in this process: the sender's write and the receiver's read, and for a
// request the answer's few bytes back; wrap, when set, puts both ends in
// TLS first.
func loopback(name string, size int, src [][]byte, line func(string, func(int) error) error, wrap func(client, server net.Conn) (net.Conn, net.Conn, error)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() { _ = ln.Close() }() // best effort
	type conn struct{ c net.Conn }
	accepted := make(chan conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- conn{c}
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer func() { _ = client.Close() }() // best effort
	sc, ok := <-accepted
	if !ok {
		return fmt.Errorf("accept failed")
	}
	server := sc.c
	defer func() { _ = server.Close() }() // best effort
	if wrap != nil {
		if client, server, err = wrap(client, server); err != nil {
			return err
		}
	}
	// The server reads each object and answers one byte.
	go func() {
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(server, buf); err != nil {
				return
			}
			if _, err := server.Write(buf[:1]); err != nil {
				return
			}
		}
	}()
	ack := make([]byte, 1)
	return line(name, func(i int) error {
		if _, err := client.Write(src[i%len(src)]); err != nil {
			return err
		}
		_, err := io.ReadFull(client, ack)
		return err
	})
}
