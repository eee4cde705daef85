package datanode

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// NewUUID returns a random datanode UUID in the form the identity file
// holds (32 lower-case hex digits).
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("datanode: new UUID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// WriteIdentity writes the identity file (DATANODE.json) of a datanode
// whose log directory is logDir (created when missing), durably and
// atomically: the datanode then starts as node nodeID with that UUID,
// without registering (the meta service must know the pair: the offline
// generator writes both). It refuses to replace an existing identity file.
func WriteIdentity(logDir, uuid string, nodeID uint64) error {
	if len(uuid) != 32 {
		return fmt.Errorf("datanode: identity: UUID %q: want 32 hex digits", uuid)
	}
	if _, err := hex.DecodeString(uuid); err != nil {
		return fmt.Errorf("datanode: identity: UUID %q: want 32 hex digits", uuid)
	}
	if nodeID == 0 || nodeID >= 1<<16 {
		return fmt.Errorf("datanode: identity: node ID %d not in [1, 65535]", nodeID)
	}
	path := filepath.Join(logDir, identityFile)
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("datanode: identity: %s exists", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("datanode: identity: %w", err)
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("datanode: identity: %w", err)
	}
	if err := saveJSON(path, identity{UUID: uuid, NodeID: nodeID}); err != nil {
		return fmt.Errorf("datanode: identity: %w", err)
	}
	return nil
}
