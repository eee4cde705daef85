// Package lcmeta runs S3 bucket lifecycle rules (issue 35 item 3) on the
// meta service's leader: every Settings.Interval a run goes through the
// buckets that have a lifecycle configuration (the bucket configuration
// document s3meta.ConfLifecycle, as package lifecycle wrote it), in
// name order, a page of Settings.Batch keys at a time
// (namespace.Versions.ScanLifecycle, one short read under the store's
// lock), plans each key (lifecycle.Configuration.Plan) and applies a
// page's actions in one replicated batch
// (namespace.Versions.ApplyLifecycle), paced to Settings.Rate objects a
// second; then it aborts the bucket's multipart uploads due
// (namespace.Multipart.AbortUpload, each its own batch). Route: GET
// lifecycle.StatusRoute (the Status); metrics spindle_lifecycle_*.
//
// Invariants:
//
//   - Every change is a replicated batch of the meta store, made through
//     state.Mutate like a client's delete (held back by the proposal
//     backlog as client writes are): a leader change loses nothing that
//     was acknowledged.
//   - The run's Status (record 'L' 0x00, docs/FORMAT.md §13.1) holds its
//     cursor (bucket, last key done) and counts, and is written in the
//     same batch as the keys' changes it accounts for; a new leader reads
//     it and resumes from the cursor (pages scanned without a change move
//     the cursor in memory, written at least every CursorEvery: a new
//     leader may scan them again, and planning again is harmless: an
//     action applies only to versions still as planned).
//   - No scan holds the store's lock for more than one page.
//
// Concurrency: Run is the one goroutine that changes lifecycle state; it
// acts only while its member serves (serving()) and within one serving
// stint (a change of stint ends the step: memory is never trusted across
// stints). Manager.mu guards the cached Status the metrics and Run share.
package lcmeta
