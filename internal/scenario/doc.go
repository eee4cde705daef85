// Package scenario holds Spindle's benchmark scenarios (`spindle bench …`):
// each drives a real component (the engine today; datanodes and pipelines
// later) with the bounded, timed worker loops of package bench and returns a
// bench.Result with, where one exists, the raw baseline measured in the same
// run on the same directory.
//
// Invariants: every scenario is bounded in time and in operations, and in
// the disk space it uses; every figure it reports was measured in this run;
// a scenario that cannot run returns an error saying why, never a zero
// figure. Scenarios clean up the files they create.
//
// Concurrency: a scenario runs its own goroutines and returns when they have
// all stopped; callers run one scenario at a time.
package scenario
