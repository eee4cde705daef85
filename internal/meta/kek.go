package meta

import (
	"fmt"
	"log/slog"

	"github.com/spindle-store/spindle/internal/kek"
	"github.com/spindle-store/spindle/internal/meta/state"
)

// loadKEK sets cfg.KEK, unless given, from SPINDLE_KEK or the keyring file
// (cfg.KEKFile, default beside the meta directory), created at the first
// start. A replicated member that creates its own is told that every
// member needs the same keyring (docs/OPERATIONS.md §4).
func loadKEK(cfg *state.Config, log *slog.Logger) error {
	if cfg.KEK != nil {
		return nil
	}
	path := cfg.KEKFile
	if path == "" {
		path = kek.DefaultPath(cfg.Dir)
	}
	k, created, err := kek.Load(cfg.FS, path)
	if err != nil {
		return fmt.Errorf("meta: key encryption key: %w", err)
	}
	cfg.KEK = k
	switch {
	case created && len(cfg.Peers) > 1:
		log.Warn("key encryption key created: every member of the group needs this same keyring (copy the file to each member's --kek-file, or set SPINDLE_KEK alike), or a member that becomes leader cannot open the S3 secrets",
			"file", path, "key_id", k.Current())
	case created:
		log.Info("key encryption key created (keep it with the store's backups, apart from them: without it the S3 secrets cannot be opened)", "file", path, "key_id", k.Current())
	}
	return nil
}
