// Package s3gw is Spindle's S3 gateway: a stateless front end that serves
// the S3 API over Spindle's meta service (namespace, users, multipart
// uploads) and pipelines (the bytes, through internal/keyclient).
//
// # Layers
//
// The S3 protocol — routing, XML, AWS Signature V4 in all its forms
// (Authorization header, presigned query, STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// with every chunk signature verified and its -TRAILER variant,
// STREAMING-UNSIGNED-PAYLOAD-TRAILER, UNSIGNED-PAYLOAD), Content-MD5 and
// checksum trailers, ACL and policy evaluation — is versity/versitygw's,
// run through its embedgw package. This package supplies the two things
// versitygw takes from an embedder, and nothing else imports versitygw:
//
//   - Backend (backend.go, objects.go, multipart.go, and features.go for
//     object and bucket tagging and bucket CORS): versitygw's
//     backend.Backend over Spindle. Unsupported operations answer
//     NotImplemented (backend.BackendUnsupported).
//   - CORS evaluation (preflight OPTIONS, the headers of an actual request
//     with an Origin) and browser form uploads (presigned POST: the
//     policy, its conditions, success_action_*) are versitygw's, over the
//     rules and PutObject this package supplies; s3extra.PostFilename
//     only puts S3's ${filename} in a form's key. s3extra holds the
//     stateless helpers (tag sets, conditional-write shapes, the CORS
//     documents' cache).
//   - IAM (iam.go): versitygw's auth.IAMService over the meta service's S3
//     users. The root user (Config.AccessKey/SecretKey) has full access;
//     other users reach the buckets they own (ACLs versitygw evaluates,
//     stored with the bucket in the meta service). Users are looked up
//     through the identity cache (package idcache).
//
// Besides, middlewares before versitygw's routes take what S3-compatible
// servers take and versitygw refuses (sigv2.go: V2 presigned URLs;
// internal/s3gw/sigcompat: a Date header instead of X-Amz-Date, no
// x-amz-content-sha256, a chunked body without a length), verifying the
// signature themselves before re-signing the request for versitygw;
// sigcompat also answers Expect: 100-continue only once the signature is
// checked (fasthttp's ExpectHandler).
//
// Replacing the front end means rewriting Backend and IAM against another
// library; the meta service's S3 API (metaapi/s3.go) stays.
//
// # Mapping
//
//   - A bucket is a meta service bucket with an owner (the creator's access
//     key), versitygw's ACL document, a bucket policy and an object
//     ownership (s3permapi; perms.go). versitygw reads them on every
//     request; a gateway caches them for ACLCacheTTL (1 s, PermCache), so a
//     change through another gateway applies here within that (its own
//     changes at once).
//   - Permissions (internal/s3perm): versitygw evaluates the bucket policy
//     (explicit Deny first) and the bucket ACL; the IAM is its
//     PolicyEvaluator for the identity side: the bucket owner's rights,
//     bucket and object ACL grants where ownership enables ACLs, and the
//     meta service's grants of the user (spindle admin grant; iam_policy.go).
//     An unsigned request is served only where a policy or ACL makes the
//     bucket public (versitygw) or, for a GET or HEAD of an object, where
//     the object's ACL grants everyone READ (anon.go). The meta service
//     checks the user's grants again (identity.go). ACL requests and
//     answers: package s3acl.
//   - An object is a key; its S3 metadata (ETag = MD5 hex, Content-Type and
//     the standard headers, x-amz-meta-*, the client's checksum, its tag
//     set under s3meta.TaggingHeader) is stored in the key's record,
//     committed in the same batch as its blocks: a reader sees the object
//     completely or not at all, right after the PUT returns. A bucket's tag
//     set and CORS rules are meta service records (metaapi/s3meta).
//   - Conditional writes (If-None-Match: *, If-Match on PUT and
//     CompleteMultipartUpload) are checked by the meta service inside the
//     commit, under its lock: of writers racing on a key exactly one
//     commits; the gateway never reads then writes.
//   - A PUT streams the body through keyclient.Put (bounded memory: the key
//     client's chunk window), verifying the client's checksum as it goes
//     (versitygw's HashReader for header checksums, its chunk readers for
//     trailers and chunk signatures) and hashing the MD5 (ETag): the
//     Backend's md5batch.Batcher hashes the bytes of the requests in flight
//     together, asynchronously, while the chunks are written; the commit
//     waits for the sum, and the put waits for the hashing before it lets
//     the key client's buffers go (hashingReader). A mismatch fails the
//     read before the commit: the blocks written are unreferenced and the
//     meta service deletes them; no key changes.
//   - A GET streams keyclient.ReadKey into the response through a pipe;
//     every piece is verified against the CRC32C stored per 16 KiB, and a
//     whole-object read against the key's CRC32C. x-amz-checksum-crc32c is
//     answered from the key's record (the CRC32C the key client computed
//     at put time, or combined from the parts' for a multipart object)
//     without reading the data; only for whole-object reads.
//   - Multipart: each part is written like a key and committed as a part
//     (metaapi.CommitPart); completion makes the key from the parts' block
//     lists in the meta service, O(parts), no data copied; ETag
//     md5-of-part-md5s-N. The part sizes are kept with the key (GetObject
//     and HeadObject ?partNumber=, GetObjectAttributes ObjectParts).
//   - Listings are range scans in the meta service, delimiter included;
//     continuation tokens are the last entry returned.
//   - Versions (package s3ver, metaapi/versionapi): the meta service makes
//     a version of every commit in a versioned bucket and keeps the old
//     ones; the gateway passes version IDs through (GET, HEAD, DELETE,
//     copy sources, ListObjectVersions) and answers in S3's shapes.
//   - CopyObject and UploadPartCopy stream the source's bytes into a new
//     key or part (blocks are never shared between keys: a block belongs to
//     exactly one key, which is what the meta service's deletions assume).
//
// # Concurrency
//
// Backend and IAM are safe for concurrent use (they hold only clients that
// are). versitygw's embedgw runs one gateway per process (package-level
// state); Run refuses a second one.
package s3gw
