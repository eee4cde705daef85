package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/bulk"
	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/metaapi"
	"github.com/spindle-store/spindle/internal/tlsconf"
)

// Issue 17's first acceptance line: against a default `spindle server`
// (this test binary as spindle, a child process with its datanodes), a
// plaintext connection, a TLS connection without a client certificate and
// one with a certificate of another CA are refused on every port the
// server's processes listen on, and the server keeps serving. The S3
// port is HTTPS without client certificates (S3 clients sign requests
// instead): plaintext is refused there, and a TLS request without a
// signature gets no data. Each probe is first run with the server's own
// admin certificate and must be answered: the probes can tell.
func TestDefaultServerRefusesConnectionsWithoutValidCert(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	cmd := exec.Command(exe, "server", "--dir", filepath.Join(dir, "srv"), "--meta-listen", "127.0.0.1:0",
		"--s3-listen", "127.0.0.1:0", "--console-listen", "off", "--ready-file", ready, "--log-level", "warn")
	cmd.Env = append(os.Environ(), asSpindleEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := stopAtEnd(t, cmd)
	var metaAddr string
	for i := 0; metaAddr == ""; i++ {
		if b, err := os.ReadFile(ready); err == nil && bytes.Count(b, []byte("\n")) >= 2 {
			metaAddr = strings.SplitN(string(b), "\n", 2)[0]
			break
		}
		if i == 1200 {
			t.Fatalf("spindle server not ready in 120 s: %s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	s3Addr := s3ListenAddr(t, cmd.Process.Pid, metaAddr)

	// The server's own client certificate, as the commands find it.
	p, _, found, err := tlsconf.LoadClientProfile(metaAddr)
	if err != nil || !found || p.Insecure {
		t.Fatalf("client profile for %s: %+v, found %v, %v", metaAddr, p, found, err)
	}
	own, err := tls.LoadX509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	// A certificate of another CA, with the same name and role.
	otherDir := filepath.Join(dir, "other")
	other, err := tlsconf.CreateCA(otherDir, "other-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	oc, ok, err := other.Issue(tlsconf.IssueRequest{Name: tlsconf.LocalName(tlsconf.RoleAdmin), Role: tlsconf.RoleAdmin, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.X509KeyPair(oc, ok)
	if err != nil {
		t.Fatal(err)
	}

	// Every port the server and its children listen on, each accounted
	// for: the meta service, the S3 gateway, each datanode's data
	// address and /metrics.
	out, _, err := runIn(t, nil, "admin", "nodes", "--json", "--meta", metaAddr)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []metaapi.NodeInfo
	if err := json.Unmarshal([]byte(out), &nodes); err != nil || len(nodes) != 3 {
		t.Fatalf("admin nodes: %v: %s", err, out)
	}
	kinds := map[string]string{metaAddr: "meta", s3Addr: "s3"}
	for _, n := range nodes {
		kinds[n.Addr] = "datanode"
		u := strings.TrimPrefix(n.MetricsURL, "https://")
		if u == n.MetricsURL {
			t.Fatalf("datanode %d's metrics at %q: want https", n.NodeID, n.MetricsURL)
		}
		kinds[strings.TrimSuffix(u, "/metrics")] = "metrics"
	}
	listening := listeningAddrs(t, cmd.Process.Pid)
	for _, a := range listening {
		if kinds[a] == "" {
			t.Errorf("the server's processes listen on %s, which no probe covers", a)
		}
	}
	for a := range kinds {
		if !slices.Contains(listening, a) {
			t.Errorf("%s (%s) is not among the listening addresses %v", a, kinds[a], listening)
		}
	}

	valid := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{own}}
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "127.0.0.1"}
	otherCA := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{foreign}}
	for addr, kind := range kinds {
		t.Run(kind+" "+addr, func(t *testing.T) {
			if got := probePort(addr, kind, valid); got != answered {
				t.Fatalf("with the server's own certificate: %s, want it answered", got)
			}
			if got := probePort(addr, kind, nil); got == answered {
				t.Errorf("plaintext connection answered")
			}
			if kind == "s3" {
				// HTTPS without client certificates: a request that is not
				// signed gets no data.
				if got := probePort(addr, "s3-data", noCert); got != refusedByService {
					t.Errorf("an unsigned S3 request over TLS: %s, want refused by the service (403)", got)
				}
				return
			}
			if got := probePort(addr, kind, noCert); got == answered {
				t.Errorf("TLS connection without a client certificate answered")
			}
			if got := probePort(addr, kind, otherCA); got == answered {
				t.Errorf("TLS connection with another CA's certificate answered")
			}
		})
	}

	// The server keeps serving: a put and a get through the command line.
	src := filepath.Join(dir, "value")
	value := bytes.Repeat([]byte("after the probes "), 100_000) // ~1.7 MB: through the datanodes, not inline
	if err := os.WriteFile(src, value, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runIn(t, nil, "bucket", "create", "--meta", metaAddr, "probed"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runIn(t, nil, "put", "--meta", metaAddr, "probed/k", src); err != nil {
		t.Fatal(err)
	}
	got, _, err := runIn(t, nil, "get", "--meta", metaAddr, "probed/k", "-")
	if err != nil || got != string(value) {
		t.Fatalf("get after the probes: %v (%d bytes, want %d)", err, len(got), len(value))
	}
	select {
	case <-exited:
		t.Fatalf("the server exited: %s", stderr.String())
	default:
	}
	if after := listeningAddrs(t, cmd.Process.Pid); !slices.Equal(after, listening) {
		t.Errorf("listening addresses after the probes %v, before %v", after, listening)
	}
}

type probeResult string

const (
	answered         probeResult = "answered"
	refusedByService probeResult = "refused by the service"
)

// probePort connects to addr (over TLS with cfg, plaintext when nil), sends a
// request of kind's protocol and says whether the protocol answered it.
func probePort(addr, kind string, cfg *tls.Config) (res probeResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return probeResult("dial: " + err.Error())
	}
	raw := c // closed as is: a TLS client over it is never closed (no close_notify)
	defer func() {
		if err := raw.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			res = probeResult(fmt.Sprintf("%s; close: %v", res, err))
		}
	}()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return probeResult("deadline: " + err.Error())
	}
	if cfg != nil {
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return probeResult("handshake: " + err.Error())
		}
		c = tc
	}
	var req []byte
	switch kind {
	case "meta":
		req = []byte("GET /v1/buckets HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n")
	case "metrics":
		req = []byte("GET /metrics HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n")
	case "s3", "s3-data":
		// ListBuckets: refused to an anonymous caller (S3 lets a
		// policy or ACL open a bucket's objects, never the list of buckets).
		req = []byte("GET / HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n\r\n")
	case "datanode": // a bulk export request for container 1 (bulk/doc.go)
		req = make([]byte, 24)
		req[0], req[1], req[2], req[3] = bulk.Magic0, bulk.Magic1, bulk.Version, 1
		binary.LittleEndian.PutUint64(req[8:], 1)
		binary.LittleEndian.PutUint32(req[20:], crc32c.Checksum(req[:20]))
	}
	if _, err := c.Write(req); err != nil {
		return probeResult("write: " + err.Error())
	}
	resp, err := io.ReadAll(io.LimitReader(c, 1<<16))
	if len(resp) == 0 {
		return probeResult(fmt.Sprintf("no answer (%v)", err))
	}
	switch kind {
	case "datanode":
		if resp[0] == bulk.Magic0 && len(resp) > 1 && resp[1] == bulk.Magic1 {
			return answered // a status: NOT_FOUND for container 1
		}
	case "s3":
		if bytes.HasPrefix(resp, []byte("HTTP/1.1 ")) {
			return answered // any status: the S3 API heard the request
		}
	case "s3-data":
		if bytes.HasPrefix(resp, []byte("HTTP/1.1 403")) {
			return refusedByService
		}
	default:
		if bytes.HasPrefix(resp, []byte("HTTP/1.1 200")) {
			return answered
		}
	}
	line, _ := bufio.NewReader(bytes.NewReader(resp)).ReadString('\n')
	return probeResult(fmt.Sprintf("not answered: %q", strings.TrimSpace(line)))
}

// s3ListenAddr waits (bounded) until the server process pid listens on
// one address besides the meta service's, and returns it: the S3 gateway
// (in the server's process, as the meta service; the datanodes are its
// children) binds port 0 and reports it nowhere else, its embedded
// server taking an address, not a listener.
func s3ListenAddr(t *testing.T, pid int, metaAddr string) string {
	t.Helper()
	for i := 0; ; i++ {
		var others []string
		for _, a := range listeningAddrsOf(t, pid, false) {
			if a != metaAddr {
				others = append(others, a)
			}
		}
		if len(others) > 1 {
			t.Fatalf("the server process listens on %v besides the meta service (%s): want the S3 gateway alone", others, metaAddr)
		}
		if len(others) == 1 {
			return others[0]
		}
		if i == 300 {
			t.Fatalf("the server's S3 gateway not listening after 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listeningAddrs lists, sorted, the TCP addresses on which pid and its
// descendants listen (from /proc: their socket descriptors, matched with
// the kernel's table of listening sockets).
func listeningAddrs(t *testing.T, pid int) []string {
	t.Helper()
	return listeningAddrsOf(t, pid, true)
}

// listeningAddrsOf is listeningAddrs of pid alone, or with its descendants.
func listeningAddrsOf(t *testing.T, pid int, descendants bool) []string {
	t.Helper()
	pids := []int{pid}
	for i := 0; descendants && i < len(pids); i++ { // descendants, breadth first
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces, so cut at the last ')'.
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(pids[i]) && !slices.Contains(pids, p) {
				pids = append(pids, p)
			}
		}
	}
	inodes := map[string]bool{}
	for _, p := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var out []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			hostPort := strings.Split(f[1], ":")
			port, _ := strconv.ParseUint(hostPort[1], 16, 16)
			host := "?"
			if len(hostPort[0]) == 8 { // IPv4, little-endian hex
				ip, _ := strconv.ParseUint(hostPort[0], 16, 32)
				host = net.IPv4(byte(ip), byte(ip>>8), byte(ip>>16), byte(ip>>24)).String()
			} else {
				host = "[" + hostPort[0] + "]"
			}
			out = append(out, net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(int(port))))
		}
	}
	slices.Sort(out)
	return out
}
