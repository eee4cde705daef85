package s3extra

import (
	"strings"
	"testing"
	"time"

	"github.com/versity/versitygw/s3err"
)

func code(err error) string {
	if e, ok := err.(s3err.S3Error); ok {
		return e.BaseError().Code
	}
	if err != nil {
		return "?" + err.Error()
	}
	return ""
}

// TestParseTagging: S3's rules for an x-amz-tagging header, lengths in
// Unicode characters.
func TestParseTagging(t *testing.T) {
	for _, tc := range []struct{ in, code string }{
		{"", ""}, {"&&", ""}, {"a", ""}, {"a=1&b=2", ""}, {"k%20k=v+v", ""},
		{strings.Repeat("é", 128) + "=" + strings.Repeat("ü", 256), ""},
		{strings.Repeat("é", 129) + "=v", "InvalidTag"},
		{"k=" + strings.Repeat("ü", 257), "InvalidTag"},
		{"a=1&a=2", "InvalidArgument"}, {"=v", "InvalidArgument"}, {"a%", "InvalidArgument"},
		{"a*=1", "InvalidTag"}, {"a=1!", "InvalidTag"},
		{"1&2&3&4&5&6&7&8&9&10", ""}, {"1&2&3&4&5&6&7&8&9&10&11", "BadRequest"},
	} {
		if _, err := ParseTagging(tc.in); code(err) != tc.code {
			t.Errorf("%.30q: %v, want %q", tc.in, err, tc.code)
		}
	}
	tags, err := ParseTagging("k%20k=v+v&x")
	if err != nil || tags["k k"] != "v v" || tags["x"] != "" || len(tags) != 2 {
		t.Fatalf("%v %v", tags, err)
	}
}

// TestRewriteKey: ${filename} in the key field becomes the file part's
// base name; a form without either is left alone.
func TestRewriteKey(t *testing.T) {
	form := "--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nup/${filename}\r\n--b\r\n" +
		"Content-Disposition: form-data; name=\"policy\"\r\n\r\np\r\n--b\r\n" +
		"Content-Disposition: form-data; name=\"file\"; filename=\"C:\\\\dir\\\\a b.txt\"\r\nContent-Type: text/plain\r\n\r\nDATA\r\n--b--\r\n"
	got := string(rewriteKey([]byte(form)))
	if !strings.Contains(got, "\r\n\r\nup/a b.txt\r\n--b") || !strings.HasSuffix(got, "DATA\r\n--b--\r\n") {
		t.Fatalf("rewritten:\n%q", got)
	}
	for _, f := range []string{strings.Replace(form, "${filename}", "fixed", 1), strings.Replace(form, "; filename=\"C:\\\\dir\\\\a b.txt\"", "", 1)} {
		if got := string(rewriteKey([]byte(f))); got != f {
			t.Fatalf("changed a form it should not:\n%q", got)
		}
	}
}

// TestDocCache: a document is served until its TTL (to the nanosecond),
// nil included; Drop and a full cache forget.
func TestDocCache(t *testing.T) {
	c := NewDocCache(time.Second, 2)
	now := time.Unix(0, 0)
	c.now = func() time.Time { return now }
	c.Put("a", []byte("x"))
	c.Put("b", nil)
	if d, ok := c.Get("a"); !ok || string(d) != "x" {
		t.Fatal("a")
	}
	if d, ok := c.Get("b"); !ok || d != nil {
		t.Fatal("b: none set is cached too")
	}
	now = now.Add(time.Second - time.Nanosecond)
	if _, ok := c.Get("a"); !ok {
		t.Fatal("not served within its TTL")
	}
	now = now.Add(time.Nanosecond)
	if _, ok := c.Get("a"); ok {
		t.Fatal("served past its TTL")
	}
	c.Put("c", []byte("y")) // full: emptied first
	if _, ok := c.Get("b"); ok {
		t.Fatal("a full cache kept its entries")
	}
	c.Drop("c")
	if _, ok := c.Get("c"); ok {
		t.Fatal("dropped, still served")
	}
}
