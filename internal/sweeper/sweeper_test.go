package sweeper

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"idemshop/internal/idempotency"
)

func TestRecordResult(t *testing.T) {
	for repair, want := range map[string]string{
		RepairCompleted:   ReconcileChanged,
		RepairRetryable:   ReconcileNoPayment,
		RepairUnreachable: ReconcileUnreachable,
		RepairFenced:      ReconcileUnchanged, // someone newer finished it
	} {
		assert.Equal(t, want, recordResult(repair), repair)
	}
}

func TestFenced(t *testing.T) {
	res, err := fenced(nil, RepairCompleted)
	assert.NoError(t, err)
	assert.Equal(t, RepairCompleted, res)

	res, err = fenced(fmt.Errorf("finish: %w", idempotency.ErrFenced), RepairCompleted)
	assert.NoError(t, err, "a newer holder owns the record: nothing to do")
	assert.Equal(t, RepairFenced, res)

	boom := errors.New("boom")
	res, err = fenced(boom, RepairCompleted)
	assert.ErrorIs(t, err, boom)
	assert.Empty(t, res)
}
