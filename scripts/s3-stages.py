#!/usr/bin/env python3
"""Names the stages of a server's CPU in a `perf record -g` of its processes
(scripts/s3-cpu.sh PERF=DIR): each sample goes to the first stage whose
pattern matches one of its frames, leaf first (a checksum inside the key
client is CRC32C; a write syscall under the meta client is the meta
client's), and each process's shares are printed, with µs per operation
when the process's CPU per op is given (s3-cpu.sh's note, without PERF:
perf's own overhead inflates the CPU of a profiled run).

  scripts/s3-stages.py DIR/get-4KiB.data [--us 'server 300, meta1 120, ...']

Processes are named from their command lines in the perf header (server,
meta<i>, dn<i>), in the order s3-cpu.sh passes them: meta members, then
datanodes (children of the server by PID), then the server.
"""
import argparse
import collections
import re
import subprocess
import sys

# (stage, pattern): checked in this order for each frame, leaf first.
STAGES = [
    ("kernel: socket send/receive (copies, TCP)", r"tcp_sendmsg|tcp_recvmsg|sock_write_iter|sock_read_iter|tcp_v4_rcv|__tcp_transmit_skb"),
    ("kernel: file write (page-cache copy)", r"shmem_file_write_iter|generic_perform_write|ext4_buffered_write_iter|filemap_read"),
    ("kernel: fdatasync", r"__x64_sys_fdatasync|__x64_sys_fsync|do_fsync"),
    ("MD5 (md5batch)", r"md5batch|crypto/md5"),
    ("CRC32C", r"hash/crc32"),
    ("SigV4 check", r"VerifyV4Signature|auth\.CheckValidSignature|utils\.ParseAuthorization|signer|sigcompat|s3gw\.\(\*sigV2\)\.check|hmac|sha256"),
    ("meta store (Pebble)", r"cockroachdb/pebble"),
    ("raft log append + fsync", r"raftgroup\.\(\*Member\)\.appendWorker|internal/wal\."),
    ("raft apply", r"raftgroup\.\(\*Member\)\.applyWorker"),
    ("raft core", r"go\.etcd\.io/raft"),
    ("raft transport", r"raftgroup\.\(\*Member\)\.(run|handleReady)|raftnet|raftmsg"),
    ("meta requests (decode, namespace, answer)", r"spindle/internal/meta[./]"),
    ("meta client", r"metaapi\."),
    ("key client / pipeline client", r"internal/keyclient|internal/client\."),
    ("pipeline transport, engine, vfs", r"internal/(pipeline|engine|datanode|transport|vfs)"),
    ("gateway backend (s3gw)", r"internal/s3gw"),
    ("S3 front end (versitygw, fiber)", r"versity/versitygw|gofiber"),
    ("HTTP server (fasthttp)", r"valyala/fasthttp"),
    ("net/http (gateway: meta/key client conns; meta: API, raft streams)", r"net/http"),
    ("Go scheduler: sysmon", r"runtime\.sysmon"),
    ("Go GC", r"runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|gcDrain|gcStart|markroot)"),
    ("Go scheduler: park/wake/netpoll", r"runtime\.(mcall|schedule|findRunnable|park_m|netpoll|goexit0|mstart|wakep|notesleep|stopm)"),
]
COMPILED = [(n, re.compile(p)) for n, p in STAGES]


def stage_of(frames):
    for f in frames:
        for name, rx in COMPILED:
            if rx.search(f):
                return name
    return "other (kernel entry, runtime)"


def names_from_header(path):
    hdr = subprocess.run(["perf", "report", "-i", path, "--header-only"], capture_output=True, text=True).stdout
    m = re.search(r"-p ([\d,]+)", hdr)
    if not m:
        return {}
    pids = [int(p) for p in m.group(1).split(",")]
    names = {}
    server = pids[-1]
    kids = sorted(pids[:-1])
    metas, dns = kids[:len(kids) - 3], kids[len(kids) - 3:]
    for i, p in enumerate(metas):
        names[p] = "meta%d" % (i + 1)
    for i, p in enumerate(dns):
        names[p] = "dn%d" % (i + 1)
    names[server] = "server"
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--us", default="", help="µs/op by process: 'server 300, meta1 120'")
    a = ap.parse_args()
    names = names_from_header(a.data)
    us = {}
    for kv in a.us.split(","):
        kv = kv.strip().split()
        if len(kv) == 2:
            us[kv[0]] = float(kv[1])
    out = subprocess.run(["perf", "script", "-i", a.data, "-F", "pid,ip,sym"], capture_output=True, text=True).stdout
    counts = collections.defaultdict(collections.Counter)
    pid, frames = None, []
    for line in out.splitlines() + [""]:
        if not line.strip():
            if pid is not None:
                counts[names.get(pid, str(pid))][stage_of(frames)] += 1
            pid, frames = None, []
            continue
        if pid is None:
            pid = int(line.split()[0])
            continue
        frames.append(line.strip())
    order = sorted(counts, key=lambda p: -sum(counts[p].values()))
    for p in order:
        total = sum(counts[p].values())
        print("## %s: %d samples%s" % (p, total, ", %.0f µs/op" % us[p] if p in us else ""))
        for st, n in counts[p].most_common():
            share = n / total
            if share < 0.01:
                continue
            print("  %-45s %5.1f %%%s" % (st, 100 * share, "  %6.0f µs/op" % (share * us[p]) if p in us else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
