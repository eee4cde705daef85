package s3extra

import (
	"errors"
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
	get := func(b string) ([]byte, bool) { d, ok, _ := c.Get(b); return d, ok }
	_, _, tk := c.Get("a")
	c.Put("a", []byte("x"), tk)
	c.Put("b", nil, tk)
	if d, ok := get("a"); !ok || string(d) != "x" {
		t.Fatal("a")
	}
	if d, ok := get("b"); !ok || d != nil {
		t.Fatal("b: none set is cached too")
	}
	now = now.Add(time.Second - time.Nanosecond)
	if _, ok := get("a"); !ok {
		t.Fatal("not served within its TTL")
	}
	now = now.Add(time.Nanosecond)
	if _, ok := get("a"); ok {
		t.Fatal("served past its TTL")
	}
	c.Put("c", []byte("y"), tk) // full: emptied first
	if _, ok := get("b"); ok {
		t.Fatal("a full cache kept its entries")
	}
	c.Drop("c")
	if _, ok := get("c"); ok {
		t.Fatal("dropped, still served")
	}
}

// A lookup that missed before a drop (this gateway's own change) cannot
// put its answer back after it: the answer may predate the change. One
// that missed after the drop can. Fails with Put ignoring its Ticket.
func TestCachePutAfterDrop(t *testing.T) {
	c := NewDocCache(time.Second, 8)
	_, ok, before := c.Get("b") // a lookup starts, then the change lands
	if ok {
		t.Fatal("empty cache answered")
	}
	c.Drop("b")
	c.Put("b", []byte("old"), before)
	if d, ok, _ := c.Get("b"); ok {
		t.Fatalf("the answer of a lookup older than the drop was kept: %q", d)
	}
	_, _, after := c.Get("b")
	c.Put("b", []byte("new"), after)
	if d, ok, _ := c.Get("b"); !ok || string(d) != "new" {
		t.Fatalf("the answer of a lookup after the drop: %q %v", d, ok)
	}
	c.Drop("other") // drops of other buckets do not refuse b's
	_, _, t2 := c.Get("b2")
	c.Drop("b3")
	c.Put("b2", []byte("v"), t2)
	if _, ok, _ := c.Get("b2"); !ok {
		t.Fatal("a drop of another bucket refused this one's answer")
	}
}

// Fetch asks once within the TTL, caches no error, and a nil cache asks
// every time.
func TestCacheFetch(t *testing.T) {
	asked := 0
	fetch := func(err error) func() (int, error) {
		return func() (int, error) { asked++; return asked, err }
	}
	c := NewCache[int](time.Second, 8)
	if _, err := c.Fetch("b", fetch(errors.New("down"))); err == nil {
		t.Fatal("fetch's error not returned")
	}
	for range 2 {
		if v, err := c.Fetch("b", fetch(nil)); err != nil || v != 2 {
			t.Fatalf("fetched %d, %v; want 2 (the error was not cached, then the value was)", v, err)
		}
	}
	var none *Cache[int]
	_, _ = none.Fetch("b", fetch(nil)) // the count is what is checked
	if v, _ := none.Fetch("b", fetch(nil)); v != 4 {
		t.Fatalf("a nil cache answered %d, want a fetch each time (4)", v)
	}
}
