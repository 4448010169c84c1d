package logging_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/platform/logging"
)

func TestClipKeepsAShortValueAndCutsALongOneAtARune(t *testing.T) {
	short := strings.Repeat("a", logging.MaxValueBytes)
	assert.Equal(t, short, logging.Clip(short))

	long := strings.Repeat("b", 1000)
	assert.Equal(t, strings.Repeat("b", logging.MaxValueBytes)+"…(1000 bytes)", logging.Clip(long))

	// "é" is two bytes; at an odd offset the cut falls inside one, and backs off to its start.
	accents := "x" + strings.Repeat("é", logging.MaxValueBytes)
	got := logging.Clip(accents)
	assert.Equal(t, "x"+strings.Repeat("é", (logging.MaxValueBytes-2)/2)+"…(257 bytes)", got)
}
