package s3client

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spindle-store/spindle/internal/crc32c"
	"github.com/spindle-store/spindle/internal/testutil"
)

// The bench's S3 client GETs as a default aws-sdk-go-v2 does: it asks for
// the object's checksum (x-amz-checksum-mode: ENABLED) and verifies the
// body against the CRC32C answered, so a body that does not match it
// fails the read.
func TestClientVerifiesGetChecksums(t *testing.T) {
	body := []byte("the bytes of an object")
	good := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32c.Checksum(body)))
	var answer atomic.Value
	modes := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		modes <- r.Header.Get("X-Amz-Checksum-Mode")
		w.Header().Set("X-Amz-Checksum-Crc32c", answer.Load().(string))
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		if _, err := w.Write(body); err != nil {
			t.Errorf("answer: %v", err)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "AKIAEXAMPLE000000001", "example-secret", "us-east-1", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	get := func() (_ []byte, err error) {
		o, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, o.Body.Close()) }()
		return io.ReadAll(o.Body)
	}
	answer.Store(good)
	if got, err := get(); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("GET with the right CRC32C: %q, %v", got, err)
	}
	if m := <-modes; m != "ENABLED" {
		t.Errorf("x-amz-checksum-mode %q, want ENABLED", m)
	}
	answer.Store(base64.StdEncoding.EncodeToString([]byte{0, 0, 0, 0}))
	if _, err := get(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "checksum") {
		t.Errorf("GET whose body does not match its CRC32C: %v, want a checksum error", err)
	}
	<-modes
}

// The bench's S3 client connections have RcvBufBytes receive
// buffers (the kernel reports twice what was set, capped at
// net.core.rmem_max), not the kernel's autotuned default.
func TestClientReceiveBuffer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, ln)
	accepted := make(chan error, 1) // the server side's Accept or Close error
	go func() {
		c, err := ln.Accept()
		if err == nil {
			err = c.Close()
		}
		accepted <- err
	}()
	c, err := New("http://"+ln.Addr().String(), "AKIAEXAMPLE000000001", "example-secret", "us-east-1", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	dial := c.Options().HTTPClient.(*http.Client).Transport.(*http.Transport).DialContext
	if dial == nil { // http.Transport's default dialer
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer testutil.CloseT(t, conn)
	if err := <-accepted; err != nil {
		t.Errorf("server side: %v", err)
	}
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Skipf("no rmem_max: %v", err)
	}
	rmemMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * min(RcvBufBytes, rmemMax); got != want {
		t.Errorf("SO_RCVBUF %d, want %d (2 × min(%d, rmem_max %d))", got, want, RcvBufBytes, rmemMax)
	}
}

// An https endpoint's certificate is checked against the CA file given
// (a server with a certificate of another CA is refused), and a CA file
// is refused for an http endpoint.
func TestEndpointCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca, other := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other.pem")
	write := func(name string, der []byte) {
		t.Helper()
		if err := os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(ca, srv.Certificate().Raw)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	write(other, der)
	head := func(caFile string) error {
		c, err := New(srv.URL, "AKIAEXAMPLE000000001", "example-secret", "us-east-1", 1, caFile)
		if err != nil {
			return err
		}
		_, err = c.HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: aws.String("b")}, func(o *s3.Options) { o.RetryMaxAttempts = 1 })
		return err
	}
	if err := head(ca); err != nil {
		t.Fatalf("HEAD with the server's CA: %v", err)
	}
	if err := head(other); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("HEAD with another CA: %v, want a certificate error", err)
	}
	if _, err := New("http://127.0.0.1:1", "a", "s", "us-east-1", 1, ca); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Fatalf("a CA for an http endpoint: %v, want refused", err)
	}
}
