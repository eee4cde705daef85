package s3gw

import (
	"fmt"
	"mime"
	"strconv"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/spindle-store/spindle/internal/metaapi"
)

// partSpan is the byte range a GET or HEAD with ?partNumber=n answers:
// part n of a multipart object (its sizes are kept with the key since
// completion), or the whole object as its part 1 for a single PUT.
// Beyond the parts: 416 InvalidPartNumber, with the count. whole says the
// span is the whole object (its checksums apply).
func partSpan(ki *metaapi.KeyInfo, n int32) (start, length int64, whole bool, err error) {
	count := int32(1)
	if ki.Object != nil && ki.Object.Parts > 0 {
		count = int32(ki.Object.Parts)
	}
	if n < 1 || n > count {
		return 0, 0, false, s3err.GetInvalidPartNumberRangeErr(count, n)
	}
	if ki.Object == nil || ki.Object.Parts == 0 {
		return 0, int64(ki.Size), true, nil
	}
	sizes := ki.Object.PartSizes
	if len(sizes) != int(count) {
		// completed before part sizes were kept
		return 0, 0, false, s3err.APIError{Code: "NotImplemented", Description: "This object's part sizes were not recorded: read it by Range.", HTTPStatusCode: 501}
	}
	for _, s := range sizes[:n-1] {
		start += int64(s)
	}
	return start, int64(sizes[n-1]), count == 1, nil
}

// contentRange is S3's Content-Range of length bytes from start of size
// (nil for an empty span).
func contentRange(start, length, size int64) *string {
	if length == 0 {
		return nil
	}
	return ptr(fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, size))
}

// objectParts is GetObjectAttributes' ObjectParts of a multipart object:
// a page of its parts after the marker (nil for a single PUT, or parts
// whose sizes were not kept).
func objectParts(ki *metaapi.KeyInfo, marker *string, maxParts *int32) (*s3response.ObjectParts, error) {
	if ki.Object == nil || ki.Object.Parts == 0 || len(ki.Object.PartSizes) != int(ki.Object.Parts) {
		return nil, nil
	}
	after := 0
	if m := deref(marker); m != "" {
		v, err := strconv.Atoi(m)
		if err != nil || v < 0 {
			return nil, s3err.GetAPIError(s3err.ErrInvalidRequest)
		}
		after = v
	}
	limit := metaapi.MaxUploadPage
	if maxParts != nil && *maxParts >= 0 {
		limit = int(*maxParts)
	}
	op := &s3response.ObjectParts{PartNumberMarker: after, MaxParts: limit}
	for i := after; i < len(ki.Object.PartSizes); i++ {
		if len(op.Parts) == limit {
			op.IsTruncated = true
			break
		}
		op.Parts = append(op.Parts, types.ObjectPart{PartNumber: ptr(int32(i + 1)), Size: ptr(int64(ki.Object.PartSizes[i]))})
		op.NextPartNumberMarker = i + 1
	}
	return op, nil
}

// userMetaIn is x-amz-meta-* as stored: a value of RFC 2047 encoded words
// decoded (S3 decodes them before storing), bytes that are not UTF-8 taken
// as ISO-8859-1 (what HTTP header bytes are) and kept as UTF-8.
func userMetaIn(m map[string]string) map[string]string {
	for k, v := range m {
		if d, err := new(mime.WordDecoder).DecodeHeader(v); err == nil {
			v = d
		}
		if !utf8.ValidString(v) {
			r := make([]rune, len(v))
			for i := range len(v) {
				r[i] = rune(v[i])
			}
			v = string(r)
		}
		m[k] = v
	}
	return m
}

// userMetaOut is x-amz-meta-* as answered: a value with non-ASCII
// characters RFC 2047 encoded (=?UTF-8?B?...?=), as S3 answers them. Raw
// UTF-8 in a header is read as ISO-8859-1 by some clients (Python's:
// "Hello Worldé" would come back "Hello WorldÃ©") and as UTF-8 by others;
// an encoded word is read the same by all.
func userMetaOut(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = mime.BEncoding.Encode("UTF-8", v)
	}
	return out
}
