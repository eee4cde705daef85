// Package s3extra holds the S3 gateway's (internal/s3gw) request helpers
// that keep no state of their own but a cache: tag sets (an x-amz-tagging
// header read with S3's limits and error codes, CopyObject's tagging
// directive, CreateBucket's tags), the shapes of conditional writes S3
// takes, the ${filename} of a browser form upload (PostFilename, a
// versitygw middleware), and Cache, a TTL cache of a value per bucket
// (DocCache: their CORS rules, versioning status, object-lock
// configuration; the gateway's PermCache: their permissions).
//
// Invariants: an object's tags are kept among its stored headers under
// s3meta.TaggingHeader in s3meta.EncodeTags's form; a tag set given here
// has passed S3's checks (at most MaxObjectTags, keys of 1..128 and values
// of up to 256 Unicode characters of tagChars, no key twice).
//
// Concurrency: the functions are safe for concurrent use; a Cache is
// (its own mutex); PostFilename holds at most postFilenameParallel forms
// in memory at once.
package s3extra
