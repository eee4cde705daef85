package s3gw_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
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
		o.Close()
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
	resp.Body.Close()
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
