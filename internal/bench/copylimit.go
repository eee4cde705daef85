package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// Copy limits: what one stream of each part of a container copy reaches on
// this machine, measured alone, the way fio (numjobs=1) and iperf3 (-P 1)
// measure them by default. A re-replication's rate is compared with the
// slowest of them.

// copyLimitBufBytes is the read/write size of the limit measurements.
const copyLimitBufBytes = 4 << 20

// Rate is one measured stream.
type Rate struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MBPerS  float64 `json:"mb_per_s"`
	// CPUSeconds is this process's CPU time (user + system, every thread)
	// over the timed part of each pass (not opening or removing files) —
	// both ends of the loopback stream run here — and CPUSecondsPerGB the
	// same per 10^9 bytes: the work one byte costs this machine, whoever
	// else runs. 0 when not measured.
	CPUSeconds      float64 `json:"cpu_seconds,omitempty"`
	CPUSecondsPerGB float64 `json:"cpu_seconds_per_gb,omitempty"`

	from, to time.Time // the first pass's start, the last pass's end
}

// Span is when the measurement ran: from the start of its first pass to
// the end of its last (zero for a Rate not measured by MeasureCopyLimits).
func (r Rate) Span() (from, to time.Time) { return r.from, r.to }

func rateOf(n int64, d time.Duration) Rate {
	s := d.Seconds()
	return Rate{Bytes: n, Seconds: s, MBPerS: float64(n) / 1e6 / max(s, 1e-9)}
}

// CopyLimits are the three single-stream limits and the slowest.
type CopyLimits struct {
	DiskRead  Rate `json:"disk_read"`
	DiskWrite Rate `json:"disk_write"`
	Loopback  Rate `json:"loopback"`
	// Limit is the slowest of the three, in MB/s.
	Limit float64 `json:"limit_mb_per_s"`
	// LimitedBy names it: "disk_read", "disk_write" or "loopback".
	LimitedBy string `json:"limited_by"`
}

// MaxLimitPasses bounds the passes of one limit measurement.
const MaxLimitPasses = 16

// SocketTuning sets the socket options of the loopback measurement's two
// ends, as the copies set theirs (bulk.TuneSender, bulk.TuneReceiver): a
// copy limit measured with smaller buffers than the copies use would be
// lower than what the network gives them (1.6–1.8 GB/s against 2.5–3.1
// GB/s on the 2-vCPU VM of docs/ARCHITECTURE.md §14). Nil leaves a side at
// the kernel's defaults.
type SocketTuning struct {
	Sender, Receiver func(net.Conn)
}

// MeasureCopyLimits measures, one stream each: reading files (4 MiB reads,
// up to maxBytes in all), writing a new file of maxBytes in dir (4 MiB
// writes, then fdatasync; removed after), and sending the files over a TCP
// connection on 127.0.0.1 with sendfile to a reader that discards them,
// both ends tuned by tune.
// Each is repeated (at most MaxLimitPasses times) until it ran for
// minDuration, and its rate is all its bytes over all its time: one pass
// of a fraction of a second swings by a third on a shared VM.
func MeasureCopyLimits(ctx context.Context, dir string, files []string, maxBytes int64, minDuration time.Duration, tune SocketTuning) (CopyLimits, error) {
	var l CopyLimits
	if len(files) == 0 || maxBytes <= 0 {
		return l, errors.New("copy limits: no files to read")
	}
	var err error
	if l.DiskWrite, err = repeatRate(minDuration, func() (Rate, error) { return DiskWriteRate(ctx, dir, maxBytes) }); err != nil {
		return l, err
	}
	if l.DiskRead, err = repeatRate(minDuration, func() (Rate, error) { return DiskReadRate(ctx, files, maxBytes) }); err != nil {
		return l, err
	}
	if l.Loopback, err = repeatRate(minDuration, func() (Rate, error) { return LoopbackRate(ctx, files, maxBytes, tune) }); err != nil {
		return l, err
	}
	l.pickLimit()
	return l, nil
}

func repeatRate(minDuration time.Duration, f func() (Rate, error)) (Rate, error) {
	total := Rate{from: time.Now()}
	for pass := 0; pass < MaxLimitPasses && (pass == 0 || total.Seconds < minDuration.Seconds()); pass++ {
		r, err := f()
		if err != nil {
			return total, err
		}
		total.CPUSeconds += r.CPUSeconds
		total.Bytes += r.Bytes
		total.Seconds += r.Seconds
	}
	total.MBPerS = float64(total.Bytes) / 1e6 / max(total.Seconds, 1e-9)
	if total.Bytes > 0 && total.CPUSeconds > 0 {
		total.CPUSeconds = roundTo(total.CPUSeconds, 1e3)
		total.CPUSecondsPerGB = roundTo(total.CPUSeconds*1e9/float64(total.Bytes), 1e3)
	}
	total.to = time.Now()
	return total, nil
}

// SelfCPUSeconds is this process's user + system time so far (0 when
// getrusage fails).
func SelfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func (l *CopyLimits) pickLimit() {
	var r Rate
	r, l.LimitedBy = l.Slowest()
	l.Limit = r.MBPerS
}

// Slowest returns the slowest of the three measurements and its name
// ("disk_read", "disk_write" or "loopback"; the first of equals).
func (l CopyLimits) Slowest() (Rate, string) {
	r, name := l.DiskRead, "disk_read"
	if l.DiskWrite.MBPerS < r.MBPerS {
		r, name = l.DiskWrite, "disk_write"
	}
	if l.Loopback.MBPerS < r.MBPerS {
		r, name = l.Loopback, "loopback"
	}
	return r, name
}

// DiskWriteRate writes sizeBytes to a new file in dir with 4 MiB writes and
// one fdatasync at the end, then removes it (SequentialWriteBaseline).
func DiskWriteRate(ctx context.Context, dir string, sizeBytes int64) (Rate, error) {
	b, err := SequentialWriteBaseline(ctx, dir, sizeBytes)
	if err != nil {
		return Rate{}, fmt.Errorf("disk write limit: %w", err)
	}
	r := rateOf(b.Bytes, time.Duration(b.Seconds*float64(time.Second)))
	r.CPUSeconds = b.CPUSeconds
	return r, nil
}

// SequentialWriteBaseline is a disk's sequential write bandwidth: one
// writer, one new file of sizeBytes (rounded up to whole 4 MiB writes) in
// dir, one fdatasync after the last write, the file removed — RunBaseline
// with those settings.
func SequentialWriteBaseline(ctx context.Context, dir string, sizeBytes int64) (Baseline, error) {
	ops := max((sizeBytes+copyLimitBufBytes-1)/copyLimitBufBytes, 1)
	return RunBaseline(ctx, BaselineConfig{
		Dir: dir, Writers: 1, ChunkSizeBytes: copyLimitBufBytes, WritesPerSync: int(ops), MaxOps: ops,
		FileSizeBytes: ops * copyLimitBufBytes, Pattern: PatternOverwrite, Progress: io.Discard,
	})
}

// DiskReadRate reads the files in order (4 MiB reads) until maxBytes.
func DiskReadRate(ctx context.Context, files []string, maxBytes int64) (Rate, error) {
	buf := make([]byte, copyLimitBufBytes)
	start, cpu0 := time.Now(), SelfCPUSeconds()
	var n int64
	for _, name := range files {
		if n >= maxBytes {
			break
		}
		f, err := os.Open(name)
		if err != nil {
			return Rate{}, fmt.Errorf("disk read limit: %w", err)
		}
		for n < maxBytes {
			if err := ctx.Err(); err != nil {
				closeQuietly(f)
				return Rate{}, err
			}
			k, err := f.Read(buf[:min(int64(len(buf)), maxBytes-n)])
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				closeQuietly(f)
				return Rate{}, fmt.Errorf("disk read limit: %w", err)
			}
		}
		closeQuietly(f)
	}
	r := rateOf(n, time.Since(start))
	r.CPUSeconds = SelfCPUSeconds() - cpu0
	return r, nil
}

// LoopbackRate sends the files (up to maxBytes) over one TCP connection on
// 127.0.0.1 — io.Copy of each *os.File to the *net.TCPConn, which is
// sendfile — to a reader that discards them into a 1 MiB buffer; the time
// runs until the reader has everything. tune sets both ends' socket
// options before the first byte.
func LoopbackRate(ctx context.Context, files []string, maxBytes int64, tune SocketTuning) (Rate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Rate{}, fmt.Errorf("loopback limit: %w", err)
	}
	defer closeQuietly(ln)
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer closeQuietly(c)
		if tune.Receiver != nil {
			tune.Receiver(c)
		}
		buf := make([]byte, 1<<20)
		var n int64
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		got <- n
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return Rate{}, fmt.Errorf("loopback limit: %w", err)
	}
	if tune.Sender != nil {
		tune.Sender(c)
	}
	stop := context.AfterFunc(ctx, func() { closeQuietly(c) })
	defer stop()
	start, cpu0 := time.Now(), SelfCPUSeconds()
	var sent int64
	for _, name := range files {
		if sent >= maxBytes {
			break
		}
		f, err := os.Open(name)
		if err != nil {
			closeQuietly(c)
			return Rate{}, fmt.Errorf("loopback limit: %w", err)
		}
		k, err := io.Copy(c, &io.LimitedReader{R: f, N: maxBytes - sent})
		closeQuietly(f)
		sent += k
		if err != nil {
			closeQuietly(c)
			return Rate{}, fmt.Errorf("loopback limit: %w", err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		closeQuietly(c)
		return Rate{}, fmt.Errorf("loopback limit: %w", err)
	}
	n := <-got
	elapsed, cpu := time.Since(start), SelfCPUSeconds()-cpu0
	closeQuietly(c)
	if n != sent {
		return Rate{}, fmt.Errorf("loopback limit: sent %d bytes, received %d", sent, n)
	}
	r := rateOf(n, elapsed)
	r.CPUSeconds = cpu
	return r, nil
}

// FilesUnder lists the regular files under dir whose names end in suffix,
// largest first, up to maxBytes in all.
func FilesUnder(dir, suffix string, maxBytes int64) ([]string, error) {
	type fi struct {
		name string
		size int64
	}
	var all []fi
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && filepath.Ext(p) == suffix {
			info, err := d.Info()
			if err != nil {
				return err
			}
			all = append(all, fi{p, info.Size()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// largest first: a limit measured on big files is not a measure of
	// per-file overhead
	sort.Slice(all, func(i, j int) bool { return all[i].size > all[j].size })
	var out []string
	var n int64
	for _, f := range all {
		if n >= maxBytes {
			break
		}
		out = append(out, f.name)
		n += f.size
	}
	return out, nil
}
