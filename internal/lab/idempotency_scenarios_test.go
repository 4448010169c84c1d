package lab_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The Idempotency-Key and form-token scenarios: each runs its unsafe and guarded side against the
// in-process shop, and the numbers measured on the rows are checked here as well as by the verdict.

func TestS2(t *testing.T) {
	t.Parallel()
	r := runScenario(t, newLabEnv(t, nil), "S2")
	assert.Greater(t, r.Unsafe.Measured["orders"], int64(1), "a double submit created several orders")
	assert.EqualValues(t, 1, r.Guarded.Measured["orders"])
	assert.Zero(t, r.Guarded.Measured["answers_5xx"]+r.Guarded.Measured["answers_other"], "only 201 or 409 in use")
	assert.EqualValues(t, 1, r.Guarded.Measured["distinct_bodies"], "every 201 is the same answer")
	assert.EqualValues(t, 1, r.Guarded.Measured["replayed"])
}

func TestS3(t *testing.T) {
	t.Parallel()
	r := runScenario(t, newLabEnv(t, nil), "S3")
	assert.EqualValues(t, http.StatusConflict, r.Unsafe.Measured["first_status"])
	assert.EqualValues(t, 1, r.Unsafe.Measured["key_rows_after_failure"], "the key row outlived the failed work")
	assert.EqualValues(t, http.StatusConflict, r.Unsafe.Measured["retry_status"])
	assert.EqualValues(t, 3, r.Unsafe.Measured["retries_blocked"])
	assert.EqualValues(t, 0, r.Unsafe.Measured["orders"])
	assert.EqualValues(t, 1, r.Unsafe.Measured["key_processing"])

	assert.EqualValues(t, http.StatusConflict, r.Guarded.Measured["first_status"])
	assert.EqualValues(t, 0, r.Guarded.Measured["key_rows_after_failure"], "rolled back with the work")
	assert.EqualValues(t, http.StatusCreated, r.Guarded.Measured["retry_status"])
	assert.EqualValues(t, 1, r.Guarded.Measured["orders"])
	assert.EqualValues(t, 1, r.Guarded.Measured["key_completed"])
}

func TestS10(t *testing.T) {
	t.Parallel()
	r := runScenario(t, newLabEnv(t, nil), "S10")
	assert.EqualValues(t, http.StatusCreated, r.Unsafe.Measured["second_status"], "body B answered as if it ran")
	assert.EqualValues(t, 1, r.Unsafe.Measured["second_got_first_body"])
	assert.EqualValues(t, 1, r.Unsafe.Measured["orders"])
	assert.EqualValues(t, 0, r.Unsafe.Measured["orders_qty_2"], "B's order never happened")

	assert.EqualValues(t, http.StatusUnprocessableEntity, r.Guarded.Measured["second_status"])
	assert.EqualValues(t, 1, r.Guarded.Measured["second_key_reused"])
	assert.EqualValues(t, 1, r.Guarded.Measured["orders"])
}

func TestS4(t *testing.T) {
	t.Parallel()
	r := runScenario(t, newLabEnv(t, nil), "S4")
	assert.EqualValues(t, http.StatusConflict, r.Unsafe.Measured["first_status"])
	assert.EqualValues(t, 0, r.Unsafe.Measured["token_kept"], "deleted before the redeem")
	assert.EqualValues(t, http.StatusBadRequest, r.Unsafe.Measured["resubmit_status"])
	assert.EqualValues(t, http.StatusBadRequest, r.Unsafe.Measured["second_resubmit_status"])
	assert.EqualValues(t, 0, r.Unsafe.Measured["coupons"])
	assert.EqualValues(t, 25, r.Unsafe.Measured["balance"], "the points the user could not spend")

	assert.EqualValues(t, http.StatusConflict, r.Guarded.Measured["first_status"])
	assert.EqualValues(t, 1, r.Guarded.Measured["token_kept"])
	assert.EqualValues(t, http.StatusCreated, r.Guarded.Measured["resubmit_status"])
	assert.EqualValues(t, http.StatusCreated, r.Guarded.Measured["second_resubmit_status"])
	assert.EqualValues(t, 1, r.Guarded.Measured["replayed"])
	assert.EqualValues(t, 1, r.Guarded.Measured["coupons"])
	assert.EqualValues(t, 1, r.Guarded.Measured["debits"])
	assert.EqualValues(t, 15, r.Guarded.Measured["balance"])
}
