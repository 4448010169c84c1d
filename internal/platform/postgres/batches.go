package postgres

import (
	"context"

	"gorm.io/gorm"
)

// DeleteInBatches runs del until one run of it deletes fewer than batch rows, so that no statement
// locks more than batch rows however much there is to delete (the reapers). del is a DELETE whose last
// parameter is the batch size, the LIMIT of the subquery that picks its rows; args are the others.
// deleted is called with each statement's count; DeleteInBatches returns the total, and the first
// error as it came.
func DeleteInBatches(ctx context.Context, db *gorm.DB, batch int, deleted func(n int64), del string, args ...any) (int64, error) {
	var total int64
	args = append(args[:len(args):len(args)], batch)
	for {
		res := db.WithContext(ctx).Exec(del, args...)
		if res.Error != nil {
			return total, res.Error
		}
		total += res.RowsAffected
		deleted(res.RowsAffected)
		if res.RowsAffected < int64(batch) {
			return total, nil
		}
	}
}
