package metaapi

// The meta service's part of the S3 gateway (internal/s3gw): users, bucket
// owners, object metadata stored with the key, listings with a delimiter,
// multipart uploads. Routes (JSON bodies, errors as elsewhere):
//
//	POST   /v1/users                          CreateUser → User (with secret)  (409 exists)
//	GET    /v1/users                          → UserList (without secrets)
//	DELETE /v1/users/{name}
//	GET    /v1/users/by-access/{access}       → User (with secret; the gateway verifies signatures)
//	POST   /v1/s3/buckets/{bucket}            CreateS3Bucket → Bucket        (409 exists)
//	GET    /v1/s3/buckets/{bucket}            → Bucket (with owner and ACL)
//	PUT    /v1/s3/buckets/{bucket}/acl        BucketACL
//	POST   /v1/uploads/create                 CreateUpload → Upload
//	POST   /v1/uploads/part                   CommitPart → Part
//	POST   /v1/uploads/complete               CompleteUpload → KeyInfo
//	POST   /v1/uploads/abort                  UploadRef
//	POST   /v1/uploads/get                    UploadRef → Upload
//	POST   /v1/uploads/parts                  ListParts → PartList
//	POST   /v1/uploads/list                   ListUploads → UploadList
//
// A multipart upload's parts are written like keys (blocks allocated for
// the upload's bucket and key) and committed one by one with CommitPart;
// CompleteUpload makes the key from the listed parts' block lists in one
// batch, O(parts) record operations, no data copied. A part uploaded again
// replaces the older one (whose blocks are scheduled for deletion); parts
// not listed in the completion, and every part of an aborted upload, are
// scheduled for deletion too.

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Limits of the S3 records.
const (
	// MaxUserNameBytes bounds a user name; MaxAccessKeyBytes and
	// MaxSecretKeyBytes its keys.
	MaxUserNameBytes  = 64
	MaxAccessKeyBytes = 128
	MaxSecretKeyBytes = 128
	// MaxObjectMetaBytes bounds an object's stored metadata (ETag,
	// headers, user metadata, checksums), as S3 bounds user metadata.
	MaxObjectMetaBytes = 8 << 10
	// MaxACLBytes bounds a bucket's stored ACL document.
	MaxACLBytes = 16 << 10
	// MaxParts bounds a multipart upload's part numbers (1..MaxParts).
	MaxParts = 10000
	// MinPartBytes is the least size of a part that is not the last.
	MinPartBytes = 5 << 20
	// MaxUploadPage bounds a page of ListUploads and ListParts.
	MaxUploadPage = 1000
)

// CreateUser creates an S3 user; empty keys are generated.
type CreateUser struct {
	Name      string `json:"name"`
	AccessKey string `json:"access_key,omitempty"`
	SecretKey string `json:"secret_key,omitempty"`
}

// User is an S3 user. SecretKey is set only where the caller needs it
// (creation, the gateway's lookup by access key).
type User struct {
	Name      string    `json:"name"`
	AccessKey string    `json:"access_key"`
	SecretKey string    `json:"secret_key,omitempty"`
	Created   time.Time `json:"created"`
}

// UserList lists users by name, without secrets.
type UserList struct {
	Users []User `json:"users"`
}

// CreateS3Bucket creates a bucket owned by Owner (an access key) with an
// ACL document the gateway keeps for it (opaque to the meta service).
type CreateS3Bucket struct {
	Owner string `json:"owner"`
	ACL   []byte `json:"acl,omitempty"`
}

// BucketACL replaces a bucket's ACL document.
type BucketACL struct {
	ACL []byte `json:"acl"`
}

// ObjectMeta is what S3 keeps of an object besides its bytes, stored in
// the key's record.
type ObjectMeta struct {
	// ETag without quotes: the MD5 of the value in hex, or
	// "md5-of-part-md5s-N" for a multipart object.
	ETag        string `json:"etag"`
	ContentType string `json:"content_type,omitempty"`
	// Headers: the other standard headers stored (Content-Encoding,
	// -Disposition, -Language, Cache-Control, Expires), canonical names.
	Headers map[string]string `json:"headers,omitempty"`
	// UserMeta: x-amz-meta-* without the prefix, lower case.
	UserMeta map[string]string `json:"user_meta,omitempty"`
	// Checksums: algorithm (CRC32, CRC32C, CRC64NVME, SHA1, SHA256, ...)
	// → base64 value, as verified at upload; the key's CRC32C is known.
	Checksums map[string]string `json:"checksums,omitempty"`
	// ChecksumType: FULL_OBJECT or COMPOSITE (multipart).
	ChecksumType string `json:"checksum_type,omitempty"`
	// Parts: the number of parts of a multipart object (0: a single PUT);
	// PartSizes their sizes in order (set by completion; not in listings).
	Parts     uint32   `json:"parts,omitempty"`
	PartSizes []uint64 `json:"part_sizes,omitempty"`
}

// Size is the encoded size the limit applies to (the strings' bytes).
func (m *ObjectMeta) Size() int {
	n := len(m.ETag) + len(m.ContentType) + len(m.ChecksumType)
	for _, mp := range []map[string]string{m.Headers, m.UserMeta, m.Checksums} {
		for k, v := range mp {
			n += len(k) + len(v)
		}
	}
	return n
}

// Validate checks the bounds.
func (m *ObjectMeta) Validate() error {
	if n := m.Size(); n > MaxObjectMetaBytes {
		return fmt.Errorf("%w: object metadata of %d bytes, at most %d", ErrInvalid, n, MaxObjectMetaBytes)
	}
	return nil
}

// Conditions of a commit (S3's conditional PUT), checked atomically with
// it: IfNoneMatch "*" refuses when the key exists; IfMatch refuses unless
// the key exists with that ETag. A refusal is ErrPrecondition.
type Conditions struct {
	IfMatch     string `json:"if_match,omitempty"`
	IfNoneMatch string `json:"if_none_match,omitempty"`
}

// UploadRef names a multipart upload.
type UploadRef struct {
	Bucket   string `json:"bucket"`
	Key      string `json:"key"`
	UploadID string `json:"upload_id"`
}

// CreateUpload starts a multipart upload; Object holds what the completed
// object will carry (its ETag is set at completion).
type CreateUpload struct {
	Bucket string      `json:"bucket"`
	Key    string      `json:"key"`
	Owner  string      `json:"owner,omitempty"`
	Object *ObjectMeta `json:"object,omitempty"`
}

// Upload is a multipart upload in progress.
type Upload struct {
	UploadRef
	Owner     string      `json:"owner,omitempty"`
	Initiated time.Time   `json:"initiated"`
	Object    *ObjectMeta `json:"object,omitempty"`
}

// CommitPart makes blocks (allocated for the upload's bucket and key) part
// Number of the upload, replacing an older part of that number.
type CommitPart struct {
	UploadRef
	Number uint32     `json:"number"`
	Size   uint64     `json:"size"`
	Blocks []KeyBlock `json:"blocks"`
	CRC32C uint32     `json:"crc32c"`
	// ETag: the part's MD5 in hex; Checksums as in ObjectMeta.
	ETag      string            `json:"etag"`
	Checksums map[string]string `json:"checksums,omitempty"`
}

// Part is a committed part, without its blocks.
type Part struct {
	Number    uint32            `json:"number"`
	Size      uint64            `json:"size"`
	ETag      string            `json:"etag"`
	CRC32C    uint32            `json:"crc32c"`
	Checksums map[string]string `json:"checksums,omitempty"`
	Modified  time.Time         `json:"modified"`
}

// ListParts asks for the parts numbered above After, at most Limit.
type ListParts struct {
	UploadRef
	After uint32 `json:"after,omitempty"`
	Limit int    `json:"limit,omitempty"`
}

// PartList is a page of parts; Next (the last number) is set when more follow.
type PartList struct {
	Upload Upload `json:"upload"`
	Parts  []Part `json:"parts"`
	Next   uint32 `json:"next,omitempty"`
}

// CompletePart names a part of the completion: its number and ETag.
type CompletePart struct {
	Number uint32 `json:"number"`
	ETag   string `json:"etag"`
}

// CompleteUpload completes an upload from the listed parts (ascending
// numbers, each ETag the stored one, every part but the last at least
// MinPartBytes). The key's ETag is the MD5 of the parts' MD5s, "-N".
type CompleteUpload struct {
	UploadRef
	Parts []CompletePart `json:"parts"`
	Conditions
}

// ListUploads asks for the uploads of a bucket whose key starts with
// Prefix, after (KeyMarker, UploadIDMarker) in (key, upload ID) order.
type ListUploads struct {
	Bucket         string `json:"bucket"`
	Prefix         string `json:"prefix,omitempty"`
	KeyMarker      string `json:"key_marker,omitempty"`
	UploadIDMarker string `json:"upload_id_marker,omitempty"`
	Limit          int    `json:"limit,omitempty"`
}

// UploadList is a page of uploads; Truncated when more follow.
type UploadList struct {
	Uploads   []Upload `json:"uploads"`
	Truncated bool     `json:"truncated,omitempty"`
}

// MultipartETag is S3's ETag of a multipart object made of parts with
// these ETags, in order: the MD5 of their MD5s in hex, "-", the number of
// parts. Quotes around an ETag are ignored; one that is not hex is an
// error.
func MultipartETag(partETags []string) (string, error) {
	h := md5.New()
	for i, e := range partETags {
		raw, err := hex.DecodeString(strings.Trim(e, `"`))
		if err != nil {
			return "", fmt.Errorf("%w: ETag %q of the %d. part is not hex", ErrInvalid, e, i+1)
		}
		h.Write(raw)
	}
	return fmt.Sprintf("%s-%d", hex.EncodeToString(h.Sum(nil)), len(partETags)), nil
}
