package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"idemshop/internal/idempotency"
	"idemshop/internal/testenv"
)

// guardServer serves POST /x through a Guard over env's database, running work for user 1.
func guardServer(t *testing.T, env *testenv.Env, work idempotency.Work) func(key string) *httptest.ResponseRecorder {
	t.Helper()
	g, err := idempotency.NewGuard(env.DB, idempotency.NewMetrics(prometheus.NewRegistry()), idempotency.GuardOptions{})
	require.NoError(t, err)
	e := echo.New()
	e.POST("/x", func(c echo.Context) error { return g.Run(c, 1, work) })
	return func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		return rec
	}
}

// A work runs inside the guard's transaction and cannot end it: a transaction it nests is a
// SAVEPOINT, so when the work then fails, what the nested block wrote rolls back with it, and no key
// is stored. (GORM would otherwise BEGIN and COMMIT on the guard's connection, committing the
// guard's transaction from inside the work.)
func TestAWorkCannotCommitTheGuardsTransaction(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	errLate := errors.New("the work fails after its nested block")
	send := guardServer(t, env, func(ctx context.Context, tx *gorm.DB, _ []byte) (int, any, error) {
		err := tx.Transaction(func(tx *gorm.DB) error {
			return tx.Exec(`UPDATE products SET stock = stock - 1 WHERE id = 1`).Error
		})
		if err != nil {
			return 0, nil, err
		}
		return 0, nil, errLate
	})
	var before int64
	require.NoError(t, env.DB.Raw(`SELECT stock FROM products WHERE id = 1`).Scan(&before).Error)

	rec := send("nested-1")
	assert.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())

	var after, keys int64
	require.NoError(t, env.DB.Raw(`SELECT stock FROM products WHERE id = 1`).Scan(&after).Error)
	require.NoError(t, env.DB.Raw(`SELECT count(*) FROM idempotency_keys`).Scan(&keys).Error)
	assert.Equal(t, before, after, "the nested block rolled back with the failed work")
	assert.Zero(t, keys)
}
