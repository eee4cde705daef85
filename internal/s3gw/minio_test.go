package s3gw_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// TestMinioClient: minio-go, unchanged, creates a bucket, puts 1 KiB and a
// 7 MiB object (multipart, 5 MiB parts), stats and reads them back
// byte-exact, lists with a prefix, reads through a presigned URL and
// removes.
func TestMinioClient(t *testing.T) {
	host := strings.TrimPrefix(endpoint, "http://")
	mc, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(rootAccess, rootSecret, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, b := testCtx(t), "minio-go"
	if err := mc.MakeBucket(ctx, b, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	objs := map[string][]byte{"m/small": randBytes(3, 1024), "m/big": randBytes(4, 7<<20)}
	for k, v := range objs {
		if _, err := mc.PutObject(ctx, b, k, bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{PartSize: 5 << 20, ContentType: "application/x-test"}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	for k, v := range objs {
		st, err := mc.StatObject(ctx, b, k, minio.StatObjectOptions{})
		if err != nil || st.Size != int64(len(v)) || st.ContentType != "application/x-test" {
			t.Fatalf("stat %s: %+v %v", k, st, err)
		}
		o, err := mc.GetObject(ctx, b, k, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(o)
		closeT(t, o)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s: %d bytes, %v", k, len(got), err)
		}
	}
	var listed []string
	for o := range mc.ListObjects(ctx, b, minio.ListObjectsOptions{Prefix: "m/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		listed = append(listed, o.Key)
	}
	if strings.Join(listed, ",") != "m/big,m/small" {
		t.Fatalf("listed %v", listed)
	}
	u, err := mc.PresignedGetObject(ctx, b, "m/small", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	closeT(t, resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(got, objs["m/small"]) {
		t.Fatalf("presigned GET: %d, %d bytes", resp.StatusCode, len(got))
	}
	for k := range objs {
		if err := mc.RemoveObject(ctx, b, k, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mc.RemoveBucket(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// prngReader is n bytes of a seeded generator: a large object without
// holding it in memory.
type prngReader struct {
	r *rand.ChaCha8
	n int64
}

func (p *prngReader) Read(b []byte) (int, error) {
	if p.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n {
		b = b[:p.n]
	}
	if _, err := p.r.Read(b); err != nil { // ChaCha8 fills b whole, never fails
		return 0, err
	}
	p.n -= int64(len(b))
	return len(b), nil
}

func prng(seed byte, n int64) io.Reader {
	var s [32]byte
	s[0] = seed
	return &prngReader{r: rand.NewChaCha8(s), n: n}
}

func sha(r io.Reader) (string, error) {
	h := sha256.New()
	_, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), err
}

// TestMinioFull (SPINDLE_S3_FULL=1; make test-s3-full): minio-go, unchanged,
// at the sizes of issue 13's acceptance — 0 B to 1 GiB (multipart, parallel
// parts), each read back and compared by SHA-256; a range across parts of the
// 1 GiB object; a server-side copy; 10,000 keys listed with a prefix, and
// with a delimiter; presigned GET and PUT; every object removed.
func TestMinioFull(t *testing.T) {
	if os.Getenv("SPINDLE_S3_FULL") == "" {
		t.Skip("SPINDLE_S3_FULL=1 runs it (make test-s3-full): it writes 1.1 GiB and 10,000 keys")
	}
	host := strings.TrimPrefix(endpoint, "http://")
	mc, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(rootAccess, rootSecret, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b := "minio-full"
	if err := mc.MakeBucket(ctx, b, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, size := range []int64{0, 1, 1024, 8 << 20, 100 << 20, 1 << 30} {
		key := fmt.Sprintf("f%d", size)
		want, _ := sha(prng(byte(i), size))
		if _, err := mc.PutObject(ctx, b, key, prng(byte(i), size), size, minio.PutObjectOptions{PartSize: 16 << 20, NumThreads: 8}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		o, err := mc.GetObject(ctx, b, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := sha(o)
		closeT(t, o)
		if err != nil || got != want {
			t.Fatalf("get %s: sha256 %s, want %s (%v)", key, got, want, err)
		}
	}
	const r0, rl = 536870000, 2000000
	var ro minio.GetObjectOptions
	if err := ro.SetRange(r0, r0+rl-1); err != nil {
		t.Fatal(err)
	}
	o, err := mc.GetObject(ctx, b, "f1073741824", ro)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	closeT(t, o)
	full := prng(5, 1<<30)
	if _, err := io.CopyN(io.Discard, full, r0); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, rl)
	if _, err := io.ReadFull(full, want); err != nil {
		t.Fatal(err)
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("range %d+%d: %d bytes, differ (%v)", r0, rl, len(got), err)
	}
	if _, err := mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: b, Object: "copy"}, minio.CopySrcOptions{Bucket: b, Object: "f8388608"}); err != nil {
		t.Fatal(err)
	}
	if o, err := mc.GetObject(ctx, b, "copy", minio.GetObjectOptions{}); err != nil {
		t.Fatal(err)
	} else if got, _ := sha(o); got != mustSHA(prng(3, 8<<20)) {
		t.Fatal("the copy differs")
	}

	keys := make(chan string)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if _, err := mc.PutObject(ctx, b, k, strings.NewReader(k), int64(len(k)), minio.PutObjectOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 10000 {
		keys <- fmt.Sprintf("many/d%02d/k%02d", i/100, i%100)
	}
	close(keys)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	count := func(opts minio.ListObjectsOptions) (n int) {
		for o := range mc.ListObjects(ctx, b, opts) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			n++
		}
		return n
	}
	if n := count(minio.ListObjectsOptions{Prefix: "many/", Recursive: true}); n != 10000 {
		t.Fatalf("listed %d keys under many/, want 10,000", n)
	}
	if n := count(minio.ListObjectsOptions{Prefix: "many/d4"}); n != 10 {
		t.Fatalf("listed %d prefixes under many/d4 with a delimiter, want 10", n)
	}

	put, err := mc.PresignedPutObject(ctx, b, "presigned", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	body := randBytes(9, 100_000)
	req, _ := http.NewRequest(http.MethodPut, put.String(), bytes.NewReader(body))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("presigned PUT: %v %v", resp, err)
	} else {
		closeT(t, resp.Body)
	}
	u, err := mc.PresignedGetObject(ctx, b, "presigned", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	closeT(t, resp.Body)
	if !bytes.Equal(got, body) {
		t.Fatal("presigned PUT then GET differs")
	}

	objs := make(chan minio.ObjectInfo)
	go func() {
		defer close(objs)
		for o := range mc.ListObjects(ctx, b, minio.ListObjectsOptions{Recursive: true}) {
			objs <- o
		}
	}()
	for e := range mc.RemoveObjects(ctx, b, objs, minio.RemoveObjectsOptions{}) {
		t.Fatalf("remove %s: %v", e.ObjectName, e.Err)
	}
	if err := mc.RemoveBucket(ctx, b); err != nil {
		t.Fatal(err)
	}
}

func mustSHA(r io.Reader) string {
	s, _ := sha(r)
	return s
}
