package rewards

// LAB ONLY — lab scenario S4: the redeem flow with the form token consumed (deleted) before the
// business step. A submit with too few points gets 409 insufficient_points like the guarded route, but
// its token is already gone, so once the user has earned the points the same form answers 400
// form_token_invalid: the user can never submit it. The assembly mounts a service with this token use
// only with ORDERS_LAB=true, at POST /lab/unsafe/v1/rewards/redeem. Compare redeemConsumeFirst with
// redeem in service.go: Begin is replaced by formtoken's ConsumeFirst, so there is nothing to Release on
// a failure and nothing to Complete (and later replay) on success.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"idemshop/internal/formtoken"
)

// ConsumeFirst is the S4 token use: the token is deleted before the redeem transaction.
var ConsumeFirst = TokenUse{name: "s4-consume-first", redeem: (*Service).redeemConsumeFirst}

// redeemConsumeFirst is redeem with the token deleted before the transaction.
func (s *Service) redeemConsumeFirst(ctx context.Context, userID int64, tokenID, rewardID string) (Answer, string, error) {
	if !formtoken.ValidID(tokenID) {
		return Answer{}, OutcomeInvalid, formtoken.ErrTokenInvalid
	}
	reward, err := s.repo.Reward(ctx, rewardID)
	if errors.Is(err, ErrUnknownReward) {
		return Answer{}, OutcomeInvalid, err
	}
	if err != nil {
		return Answer{}, OutcomeError, err
	}
	// The missing guard: the token is deleted here, before anything is known about the redeem.
	err = s.tokens.ConsumeFirst(ctx, tokenID, userID, FormName)
	switch {
	case errors.Is(err, formtoken.ErrInvalid):
		return Answer{}, OutcomeInvalid, formtoken.ErrTokenInvalid
	case err != nil:
		return Answer{}, OutcomeUnavailable, formtoken.ErrStoreUnavailable.Wrap(err)
	}
	// The same transaction as the guarded route. When it fails, the token stays deleted.
	res, _, err := s.repo.Redeem(ctx, userID, tokenID, reward)
	if errors.Is(err, ErrInsufficientPoints) {
		return Answer{}, OutcomeInsufficient, err
	}
	if err != nil {
		return Answer{}, OutcomeError, err
	}
	body, err := json.Marshal(res)
	if err != nil {
		return Answer{}, OutcomeError, fmt.Errorf("encode redeem result: %w", err)
	}
	return Answer{Result: res, Body: body}, OutcomeRedeemed, nil
}
