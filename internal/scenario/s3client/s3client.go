// Package s3client is `spindle bench s3`'s S3 client: aws-sdk-go-v2 with
// UNSIGNED-PAYLOAD and no request checksums (the client's hashing must
// not cap the PUT figures), GETs checked as a default SDK does (the
// CRC32C answered), connections with RcvBufBytes receive buffers, and an
// https endpoint's CA from a file (`--endpoint-ca`).
//
// Invariants: a client sends to one endpoint, path style; a CA file is
// taken for an https endpoint only.
//
// Concurrency: a client is safe for concurrent use (the SDK's), with
// conns idle connections kept.
package s3client

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/spindle-store/spindle/internal/tlsconf"
)

// RcvBufBytes is the receive buffer (SO_RCVBUF, capped by the
// kernel at net.core.rmem_max) of the S3 client's connections. The
// kernel's autotuned buffer (128 KiB at first, about 1 MiB after a while
// on loopback) holds less than a 1 MiB response: the gateway's write
// stops when the window is full, and the rest crosses in pieces pushed
// from the client's reads (each read's window update makes the kernel
// send the next piece on the reader's time), so both ends pay more
// segments and wakeups per object. A window that holds the whole
// response lets the gateway's one write send it (S3.md: 150 µs less CPU
// per 1 MiB GET). PUTs are unchanged (the client sends).
const RcvBufBytes = 4 << 20

// New is an SDK client that sends UNSIGNED-PAYLOAD and no request
// checksums, so that the client's hashing does not cap the PUT figures.
// GETs are what a default aws-sdk-go-v2 does (ResponseChecksumValidation
// WhenSupported): ChecksumMode ENABLED, and the SDK verifies the CRC32C
// the gateway answers (from the object's record) as the body streams.
// Its connections have RcvBufBytes receive buffers; an https endpoint's
// certificate is checked against caFile (a PEM CA; "": the system's roots).
func New(endpoint, access, secret, region string, conns int, caFile string) (*s3.Client, error) {
	var tc *tls.Config
	if caFile != "" {
		if !strings.HasPrefix(endpoint, "https://") {
			return nil, fmt.Errorf("endpoint CA %s: for an https:// endpoint only, not %q", caFile, endpoint)
		}
		pool, err := tlsconf.CAPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("endpoint CA: %w", err)
		}
		tc = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, RcvBufBytes)
		}); err != nil {
			return err
		}
		return serr
	}}
	tr := &http.Transport{Proxy: nil, DialContext: dialer.DialContext, MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 90 * time.Second, TLSClientConfig: tc}
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint), Region: region, UsePathStyle: true,
		Credentials:                credentials.NewStaticCredentialsProvider(access, secret, ""),
		HTTPClient:                 &http.Client{Transport: tr},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported,
		APIOptions:                 []func(*middleware.Stack) error{v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware},
	}), nil
}
