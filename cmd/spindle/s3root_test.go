package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// TestS3RootAfterReadmeSections (issue 33 item 5): the README's first
// section (spindle server: an S3 root key generated) then its S3 section
// (the same server restarted with SPINDLE_S3_ACCESS_KEY and
// SPINDLE_S3_SECRET_KEY) leave one user root, of the given key, listed by
// admin user ls; S3 takes the given key and refuses the generated one.
// Before, the generated key stayed as an ordinary user root
// (AccessDenied) and the given one was listed nowhere: fails without
// setting the root user's keys (checked: root listed with the generated
// key).
func TestS3RootAfterReadmeSections(t *testing.T) {
	if testing.Short() {
		t.Skip("starts spindle server twice")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srvDir := filepath.Join(dir, "spindle")
	const access, secret = "AKIAEXAMPLE000000001", "example-secret-0123456789"
	start := func(n int, env ...string) (metaAddr, s3Addr string, stop func()) {
		t.Helper()
		ready := filepath.Join(dir, "ready"+string(rune('0'+n)))
		cmd := exec.Command(exe, "server", "--dir", srvDir, "--meta-listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0", "--console-listen", "off",
			"--ready-file", ready, "--log-level", "warn")
		cmd.Env = append(append(os.Environ(), asSpindleEnv+"=1", "SPINDLE_S3_ACCESS_KEY=", "SPINDLE_S3_SECRET_KEY="), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := stopAtEnd(t, cmd)
		for i := 0; ; i++ {
			if b, err := os.ReadFile(ready); err == nil && bytes.Count(b, []byte("\n")) >= 2 {
				metaAddr = strings.SplitN(string(b), "\n", 2)[0]
				break
			}
			select {
			case <-exited:
				t.Fatalf("spindle server exited: %s", stderr.String())
			default:
			}
			if i == 1200 {
				t.Fatalf("spindle server not ready in 120 s: %s", stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		return metaAddr, s3ListenAddr(t, cmd.Process.Pid, metaAddr), func() {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				t.Fatal("spindle server did not stop within 60 s of SIGTERM")
			}
		}
	}
	users := func(metaAddr string) []metaapi.User {
		t.Helper()
		out, _, err := runIn(t, nil, "admin", "user", "ls", "--json", "--meta", metaAddr)
		if err != nil {
			t.Fatal(err)
		}
		var us []metaapi.User
		if err := json.Unmarshal([]byte(out), &us); err != nil {
			t.Fatalf("admin user ls --json: %v: %s", err, out)
		}
		return us
	}

	metaAddr, _, stop := start(1)
	first := users(metaAddr)
	if len(first) != 1 || first[0].Name != "root" {
		t.Fatalf("after the first start: users %+v, want root", first)
	}
	generated := first[0].AccessKey
	stop()

	metaAddr, s3Addr, _ := start(2, "SPINDLE_S3_ACCESS_KEY="+access, "SPINDLE_S3_SECRET_KEY="+secret)
	if us := users(metaAddr); len(us) != 1 || us[0].Name != "root" || us[0].AccessKey != access {
		t.Fatalf("after the S3 section: users %+v, want root alone with %s (the generated one was %s)", us, access, generated)
	}
	ca, err := os.ReadFile(filepath.Join(srvDir, "tls", "ca", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	list := func(a, s string) error {
		cl := s3.New(s3.Options{BaseEndpoint: aws.String("https://" + s3Addr), Region: "us-east-1", UsePathStyle: true, HTTPClient: hc,
			Credentials: credentials.NewStaticCredentialsProvider(a, s, ""), RetryMaxAttempts: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := cl.ListBuckets(ctx, &s3.ListBucketsInput{})
		return err
	}
	if err := list(access, secret); err != nil {
		t.Fatalf("S3 with the README's key: %v", err)
	}
	var ae smithy.APIError
	if err := list(generated, "whatever-secret-0"); !errors.As(err, &ae) || ae.ErrorCode() != "InvalidAccessKeyId" {
		t.Fatalf("S3 with the first start's generated key: %v, want InvalidAccessKeyId", err)
	}
}
