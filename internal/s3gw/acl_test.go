package s3gw

import (
	"testing"
	"time"

	"github.com/spindle-store/spindle/internal/s3permapi"
)

// The permissions cache answers for ACLCacheTTL, then asks again; a drop
// or a full cache forgets.
func TestPermCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewPermCache(nil)
	c.now = func() time.Time { return now }
	if _, ok := c.get("b"); ok {
		t.Fatal("empty cache answered")
	}
	c.put("b", &s3permapi.Bucket{Owner: "o"})
	now = now.Add(ACLCacheTTL - time.Nanosecond)
	if b, ok := c.get("b"); !ok || b.Owner != "o" {
		t.Fatalf("within the TTL: %+v %v", b, ok)
	}
	now = now.Add(time.Nanosecond)
	if _, ok := c.get("b"); ok {
		t.Fatal("answered after the TTL")
	}
	c.put("b", &s3permapi.Bucket{})
	c.drop("b")
	if _, ok := c.get("b"); ok {
		t.Fatal("answered after a drop")
	}
	for i := range ACLCacheMaxEntries + 1 {
		c.put(string(rune('a'+i%26))+time.Duration(i).String(), nil)
	}
	if len(c.m) > ACLCacheMaxEntries {
		t.Fatalf("%d entries, bound %d", len(c.m), ACLCacheMaxEntries)
	}
}
