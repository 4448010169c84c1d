package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A replay file is read whole, but never past maxReplayBytes (a path that streams without end must not
// fill memory), and only a bare file name falls back to the shipped recording of that name.
func TestReadReplay(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)

	big := filepath.Join(dir, "big.jsonl")
	require.NoError(t, os.WriteFile(big, make([]byte, maxReplayBytes+1), 0o600))
	_, _, err := readReplay(big)
	require.ErrorContains(t, err, "larger than 16 MiB")

	_, _, err = readReplay("/dev/zero")
	require.ErrorContains(t, err, "larger than 16 MiB", "a path without end")

	_, name, err := readReplay("decline-race.jsonl")
	require.NoError(t, err)
	assert.Equal(t, "decline-race.jsonl (shipped)", name)

	_, _, err = readReplay(filepath.Join("no-such-dir", "decline-race.jsonl"))
	require.True(t, errors.Is(err, fs.ErrNotExist), "a path with a directory does not fall back: %v", err)

	own := filepath.Join(dir, "decline-race.jsonl")
	require.NoError(t, os.WriteFile(own, []byte("{}\n"), 0o600))
	raw, name, err := readReplay("decline-race.jsonl")
	require.NoError(t, err)
	assert.Equal(t, "decline-race.jsonl", name, "a file of that name here wins")
	assert.Equal(t, "{}\n", string(raw))
}
