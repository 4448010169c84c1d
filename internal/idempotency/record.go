package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// State is the idempotency record's state (docs/design.md, "The ladder", step 2).
type State string

// The record states. A one-transaction route commits COMPLETED directly, so the others are only seen by
// routes whose effect crosses the transaction boundary (the pay flow).
const (
	StateProcessing      State = "PROCESSING"       // claimed; the outcome is not known yet
	StateCompleted       State = "COMPLETED"        // done; Response* holds the answer to replay
	StateFailedRetryable State = "FAILED_RETRYABLE" // failed before any effect could have happened; run again
	StateFailedPermanent State = "FAILED_PERMANENT" // definitively refused; replay the stored error
)

// Kinds of record (Record.Kind): what a record is about, so that workers find records by columns, never
// by matching their URL.
const (
	KindCreateOrder = "create_order" // POST /v1/orders (the one-transaction Guard)
	KindPay         = "pay"          // POST /v1/orders/{id}/pay (Store.Claim); OrderID is the order
)

// Subject is what a claimed record is about: its Kind and, for a pay record, the order (0: none).
type Subject struct {
	Kind    string
	OrderID int64
}

// Scope is what a key is unique within: one user's keys never collide with another's.
type Scope struct {
	UserID int64
	Key    string
}

// Record is one row of idempotency_keys.
type Record struct {
	ID             int64 `gorm:"primaryKey"`
	UserID         int64
	IdempotencyKey string
	Method         string
	Path           string
	Fingerprint    string
	// Kind and OrderID say what the record is about (Subject); "" and nil on rows of other routes.
	Kind           string
	OrderID        *int64
	State          State
	ResponseStatus *int
	ResponseBody   []byte
	// Fence is the highest fencing token that has written this row; a write carrying a lower token is
	// rejected by the WHERE clause of the UPDATE (docs/design.md, "The ladder", step 4).
	Fence int64
	// LockedUntil is the PROCESSING lease: until then the holder is presumed alive. On a FAILED_RETRYABLE
	// record the platform said it has no payment for, when the reconciler may ask again (Store.FinishRetryable).
	LockedUntil *time.Time
	// Attempts counts takeovers of a PROCESSING or FAILED_RETRYABLE record (retries and sweeper alike).
	Attempts int
	// Sweeps counts the sweeper's questions about this record that the downstream left unanswered.
	Sweeps    int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// TableName tells GORM the table.
func (Record) TableName() string { return "idempotency_keys" }

// Find returns the committed record for s, or (nil, nil) when there is none.
func Find(ctx context.Context, db *gorm.DB, s Scope) (*Record, error) {
	var r Record
	err := db.WithContext(ctx).
		Where("user_id = ? AND idempotency_key = ?", s.UserID, s.Key).
		Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find idempotency record: %w", err)
	}
	return &r, nil
}
