package state

import (
	"fmt"
	"time"

	"github.com/spindle-store/spindle/internal/metaapi/s3meta"
)

// A bucket's S3 configuration documents (its tag set, its CORS rules: the
// names of s3meta.BucketConfNames) are records of their own, one per
// document, beside the bucket record: 'S' | bucket | 0x00 | name. They
// are read when asked for (not held in memory) and deleted with the
// bucket.

// BucketConfPrefix is 'S' | bucket | 0x00: every configuration document
// of the bucket starts with it.
func BucketConfPrefix(bucket string) []byte {
	return append(append([]byte{prefixBucketConf}, bucket...), 0)
}

// BucketConfKey is the key of a bucket's document of that name.
func BucketConfKey(bucket, name string) []byte { return append(BucketConfPrefix(bucket), name...) }

// bucketConfVersion is the first byte of a configuration record's fields.
const bucketConfVersion = 1

// BucketConfRecord is one configuration document of a bucket: the
// gateway's canonical form of it (a tag set as x-amz-tagging's URL
// encoding, CORS rules as the XML document the client sent), opaque to
// the meta service but for its size.
type BucketConfRecord struct {
	Updated time.Time
	Doc     string
}

// Encode: version u8 = 1, updated ms u64, document str (≤
// s3meta.MaxBucketConfBytes).
func (r BucketConfRecord) Encode() []byte {
	e := newEnc()
	e.u8(bucketConfVersion)
	e.u64(ms(r.Updated))
	e.str(r.Doc)
	return e.finish()
}

// DecodeBucketConf decodes a configuration record.
func DecodeBucketConf(v []byte) (BucketConfRecord, error) {
	d := newDec("bucket configuration", v)
	if ver := d.u8(); d.err == nil && ver != bucketConfVersion {
		d.fail("version %d", ver)
	}
	r := BucketConfRecord{Updated: d.tm(), Doc: d.str(s3meta.MaxBucketConfBytes)}
	if err := d.done(); err != nil {
		return r, err
	}
	if r.Doc == "" {
		return r, fmt.Errorf("%w: bucket configuration: empty document", ErrCorrupt)
	}
	return r, nil
}
