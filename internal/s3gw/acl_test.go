package s3gw

import (
	"testing"
	"time"
)

// The ACL cache answers for ACLCacheTTL, then asks again; a drop or a full
// cache forgets.
func TestACLCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := aclCache{m: map[string]aclEntry{}, now: func() time.Time { return now }}
	if _, ok := c.get("b"); ok {
		t.Fatal("empty cache answered")
	}
	c.put("b", []byte("acl"))
	now = now.Add(ACLCacheTTL - time.Nanosecond)
	if acl, ok := c.get("b"); !ok || string(acl) != "acl" {
		t.Fatalf("within the TTL: %q %v", acl, ok)
	}
	now = now.Add(time.Nanosecond)
	if _, ok := c.get("b"); ok {
		t.Fatal("answered after the TTL")
	}
	c.put("b", []byte("acl"))
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
