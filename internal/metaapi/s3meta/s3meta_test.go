package s3meta

import (
	"maps"
	"testing"
)

// TestTagsRoundTrip: EncodeTags's form reads back as the same set, keys
// sorted whatever the map's order; TagCount counts it; names outside
// BucketConfNames are refused.
func TestTagsRoundTrip(t *testing.T) {
	tags := map[string]string{"b": "2", "a": "x y", "é/=+": "", "k&=": "v&="}
	s := EncodeTags(tags)
	if s != EncodeTags(maps.Clone(tags)) || s[:4] != "a=x+" {
		t.Fatalf("encoded %q", s)
	}
	got, err := DecodeTags(s)
	if err != nil || !maps.Equal(got, tags) {
		t.Fatalf("decoded %v, %v; want %v", got, err, tags)
	}
	if n := TagCount(map[string]string{TaggingHeader: s}); n != len(tags) {
		t.Fatalf("TagCount %d, want %d", n, len(tags))
	}
	if TagCount(nil) != 0 || EncodeTags(nil) != "" {
		t.Fatal("no tags")
	}
	if _, err := DecodeTags("a=%zz"); err == nil {
		t.Fatal("a bad escape decoded")
	}
	if ValidConfName("cors") != nil || ValidConfName("policy") == nil {
		t.Fatal("ValidConfName")
	}
}
