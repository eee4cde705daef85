// Package lifecycle is S3 bucket lifecycle (issue 35 item 3) as data and
// decisions, shared by the S3 gateway (which parses and validates a
// PutBucketLifecycleConfiguration document, internal/s3gw/s3lc) and the
// meta service's leader (which runs the rules, internal/meta/lcmeta):
//
//   - Parse reads a LifecycleConfiguration document and checks it as S3
//     does (errors of type *Error carry S3's code: MalformedXML,
//     InvalidArgument, NotImplemented for transitions); Configuration.XML
//     writes the document stored and answered back.
//   - Configuration.Plan decides what to do with one key's versions
//     (KeyVersions) at a time: expire the current version, remove
//     noncurrent versions, remove an expired object delete marker;
//     Configuration.AbortDue decides an incomplete multipart upload's.
//     Plan is pure: the caller applies the Action under its own lock,
//     after checking that the versions are still those planned for.
//   - Settings are the runner's knobs (--lifecycle-* flags; the day
//     length is shortened only by tests), Status the run's account
//     (spindle admin lifecycle status), with its client call.
//
// Invariants: a rule applies to a key only when Enabled and its filter
// (prefix, tags, object size) matches; tag filters never match a delete
// marker (it has no tags); an Action touches one key, and either expires
// its current version or removes versions, never both (the caller applies
// an Action's changes in one batch that cannot read its own writes).
// Days count from a version's creation (a noncurrent version: from its
// successor's), in units of Settings.Day; with the 24 h day of S3 the due
// time is rounded up to the next midnight UTC, as S3 does.
//
// Concurrency: functions and values only; a *Configuration is read-only
// after Parse and safe for concurrent use.
package lifecycle
