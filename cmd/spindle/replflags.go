package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/spindle-store/spindle/internal/cli"
	"github.com/spindle-store/spindle/internal/lifecycle"
	"github.com/spindle-store/spindle/internal/meta"
	"github.com/spindle-store/spindle/internal/meta/audit"
	"github.com/spindle-store/spindle/internal/meta/ecmeta"
)

// addReplicationFlags binds the replication manager's settings of cfg (the
// meta service's) to f, with meta's defaults, and returns the check to run
// before cfg is used: meta.Config treats zero as "the default", so a 0 or a
// negative count on the command line is refused here rather than silently
// replaced.
func addReplicationFlags(f *pflag.FlagSet, cfg *meta.Config) func() error {
	cfg.MaxCopiesPerSource, cfg.MaxCopiesPerTarget = meta.DefaultMaxCopiesPerSource, meta.DefaultMaxCopiesPerTarget
	cfg.MaxInflightCopies, cfg.CopyRetryAfter = meta.DefaultMaxInflightCopies, meta.DefaultCopyRetryAfter
	cfg.CopyTimeoutMin = meta.DefaultCopyTimeoutMin
	cfg.SafeModeContainerFraction = meta.DefaultSafeModeContainerFraction
	f.IntVar(&cfg.MaxCopiesPerSource, "max-copies-per-source", cfg.MaxCopiesPerSource, "re-replication: container copies one datanode sends at once, at most")
	f.IntVar(&cfg.MaxCopiesPerTarget, "max-copies-per-target", cfg.MaxCopiesPerTarget, "re-replication: container copies scheduled to one datanode at once, at most (it runs its own --max-copies of them together)")
	f.IntVar(&cfg.MaxInflightCopies, "max-inflight-copies", cfg.MaxInflightCopies, "re-replication: container copies in flight in the whole cluster, at most")
	f.DurationVar(&cfg.CopyRetryAfter, "copy-retry-after", cfg.CopyRetryAfter, "re-replication: a source whose copy failed is not chosen again for this long")
	f.DurationVar(&cfg.CopyTimeoutMin, "copy-timeout", cfg.CopyTimeoutMin, "re-replication: a copy older than this and than its size at 20 MB/s is taken as lost and scheduled again")
	cfg.MinLiveReplicas = meta.DefaultMinLiveReplicas
	f.IntVar(&cfg.MinLiveReplicas, "min-live-replicas", cfg.MinLiveReplicas, "writes go to a pipeline with at least this many HEALTHY members (2..3): one missing a DEAD member stays open while no replacement datanode exists; fewer: writes are refused")
	f.IntVar(&cfg.SafeModeMinNodes, "safe-mode-min-nodes", 0, "after a start, no replication decision until this many datanodes reported (0: min(3, registered)) ...")
	f.Float64Var(&cfg.SafeModeContainerFraction, "safe-mode-fraction", cfg.SafeModeContainerFraction, "... and this fraction of the closed containers has a replica reported (or 'spindle admin safemode exit')")
	f.StringVar(&cfg.AuditLog, "audit-log", "", "the audit log: a JSON line per change and refusal, rotated (default: beside the meta store, its --dir + .audit.jsonl; off: none)")
	f.Int64Var(&cfg.AuditMaxBytes, "audit-log-max-bytes", audit.DefaultMaxBytes, "the audit log is rotated past this size, and --audit-log-keep files kept")
	f.IntVar(&cfg.AuditKeep, "audit-log-keep", audit.DefaultKeep, "audit log files kept (the current one and the rotated ones)")
	lifecycle.AddFlags(f, &cfg.Lifecycle) // --lifecycle-*: the S3 lifecycle runner (on the meta leader)
	ecmeta.AddFlags(f)                    // --ec-compact-*: compaction of erasure-coded containers (on the meta leader)
	return func() error {
		for _, c := range []struct {
			name string
			v    int
		}{{"--max-copies-per-source", cfg.MaxCopiesPerSource}, {"--max-copies-per-target", cfg.MaxCopiesPerTarget}, {"--max-inflight-copies", cfg.MaxInflightCopies}} {
			if c.v < 1 {
				return cli.UsageErr(fmt.Errorf("%s %d: want at least 1", c.name, c.v))
			}
		}
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"--copy-retry-after", cfg.CopyRetryAfter}, {"--copy-timeout", cfg.CopyTimeoutMin}} {
			if d.v <= 0 {
				return cli.UsageErr(fmt.Errorf("%s %s: want a positive duration", d.name, d.v))
			}
		}
		if cfg.MinLiveReplicas < meta.DefaultMinLiveReplicas || cfg.MinLiveReplicas > meta.PipelineSize {
			return cli.UsageErr(fmt.Errorf("--min-live-replicas %d: want %d (a raft majority of a pipeline) to %d", cfg.MinLiveReplicas, meta.DefaultMinLiveReplicas, meta.PipelineSize))
		}
		if cfg.SafeModeMinNodes < 0 {
			return cli.UsageErr(fmt.Errorf("--safe-mode-min-nodes %d: want 0 (min(3, registered)) or more", cfg.SafeModeMinNodes))
		}
		if !(cfg.SafeModeContainerFraction > 0 && cfg.SafeModeContainerFraction <= 1) {
			return cli.UsageErr(fmt.Errorf("--safe-mode-fraction %g: want more than 0, at most 1", cfg.SafeModeContainerFraction))
		}
		return nil
	}
}
