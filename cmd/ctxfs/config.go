package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// engineConfig is the engine's configuration for a store served at root:
// the quotas (CTXFS_LIMITS, quota.FromEnv) and the journal's checkpoints
// (CTXFS_CHECKPOINT_*), read here from the server's environment, so that
// the engine reads none of it itself.
func engineConfig(getenv func(string) string, store, root string) (session.Config, error) {
	limits, err := quota.FromEnv(getenv)
	if err != nil {
		return session.Config{}, err
	}
	journal, err := journalFromEnv(getenv)
	if err != nil {
		return session.Config{}, err
	}
	return session.Config{Store: store, Root: root, Limits: limits, Journal: journal}, nil
}

// minCheckpointBytes keeps a journal file to several batches (each takes
// at least 4 KiB): below it every batch would start a new file.
const minCheckpointBytes = 16 << 10

// journalFromEnv reads the journal's checkpoint settings:
// CTXFS_CHECKPOINT_EVERY (a duration; "0" keeps the default, a negative
// one checkpoints by size only) and CTXFS_CHECKPOINT_BYTES (the size at
// which the journal moves to a new file and the old one is checkpointed).
func journalFromEnv(getenv func(string) string) (sealedlog.JournalConfig, error) {
	var c sealedlog.JournalConfig
	if v := getenv("CTXFS_CHECKPOINT_EVERY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("CTXFS_CHECKPOINT_EVERY: %v", err)
		}
		c.CheckpointEvery = d
	}
	if v := getenv("CTXFS_CHECKPOINT_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < minCheckpointBytes {
			return c, fmt.Errorf("CTXFS_CHECKPOINT_BYTES: want at least %d bytes, got %q", minCheckpointBytes, v)
		}
		c.RotateAt = n
	}
	return c, nil
}

// openWriter opens the store's engine for the writer of the store st (at
// store, served at root), and says and records the ways the store's
// filesystem gives once the store is known good: a refused start writes
// nothing.
func openWriter(st *storefs.Root, store, root string, log *slog.Logger) (*session.Engine, error) {
	cfg, err := engineConfig(os.Getenv, store, root)
	if err != nil {
		return nil, err
	}
	cfg.Log = log
	opening := time.Now()
	e, err := session.Open(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("store opened", "store", store, "took", time.Since(opening).Round(time.Millisecond).String())
	log.Info("store ways", "ways", st.Ways().String())
	if err := st.RecordWays(); err != nil {
		log.Warn("store ways not recorded for fsck and doctor", "err", err)
	}
	return e, nil
}
