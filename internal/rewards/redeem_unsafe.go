package rewards

// LAB ONLY — lab scenario S4: the redeem flow with the form token consumed (deleted) before the
// business step. A submit with too few points gets 409 insufficient_points like the guarded route, but
// its token is already gone, so once the user has earned the points the same form answers 400
// form_token_invalid: the user can never submit it. Mounted only with ORDERS_LAB=true, at POST
// /lab/unsafe/v1/rewards/redeem (JSON only). Compare redeemConsumeFirst with redeem in service.go: Begin
// is replaced by formtoken's ConsumeFirst, so there is nothing to Release on a failure and nothing to
// Complete (and later replay) on success.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"idemshop/internal/auth"
	"idemshop/internal/formtoken"
	"idemshop/internal/platform/httpproblem"
	"idemshop/internal/platform/problem"
)

// redeemConsumeFirst is redeem with the token deleted before the transaction.
func (s *Service) redeemConsumeFirst(ctx context.Context, userID int64, tokenID, rewardID string) (Answer, error) {
	if !formtoken.ValidID(tokenID) {
		return Answer{}, formtoken.ErrTokenInvalid
	}
	reward, err := s.repo.Reward(ctx, rewardID)
	if err != nil {
		return Answer{}, err
	}
	// The missing guard: the token is deleted here, before anything is known about the redeem.
	err = s.tokens.ConsumeFirst(ctx, tokenID, userID, FormName)
	switch {
	case errors.Is(err, formtoken.ErrInvalid):
		return Answer{}, formtoken.ErrTokenInvalid
	case err != nil:
		return Answer{}, formtoken.ErrStoreUnavailable.Wrap(err)
	}
	// The same transaction as the guarded route. When it fails, the token stays deleted.
	res, _, err := s.repo.Redeem(ctx, userID, tokenID, reward)
	if err != nil {
		return Answer{}, err
	}
	body, err := json.Marshal(res)
	if err != nil {
		return Answer{}, fmt.Errorf("encode redeem result: %w", err)
	}
	return Answer{Result: res, Body: body}, nil
}

// MountUnsafe adds the consume-first redeem, POST /rewards/redeem, to g, which must authenticate. It
// takes the JSON path of Handler.redeem (body {"reward"}, header Form-Token). Its submits are not counted
// in the guarded route's metrics. LAB ONLY.
func MountUnsafe(g *echo.Group, svc *Service) error {
	if svc == nil {
		return errors.New("rewards: MountUnsafe needs a service")
	}
	g.POST("/rewards/redeem", func(c echo.Context) error {
		u, err := auth.MustUser(c)
		if err != nil {
			return err
		}
		body, err := httpproblem.ReadBody(c.Request().Body)
		if err != nil {
			return fmt.Errorf("read request body: %w", err)
		}
		var req redeemRequest
		if err := problem.DecodeJSON(body, &req); err != nil {
			return err
		}
		a, err := svc.redeemConsumeFirst(c.Request().Context(), u.ID, c.Request().Header.Get(FormTokenHeader), req.Reward)
		if err != nil {
			return err
		}
		return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, a.Body)
	})
	return nil
}
