package formtoken

// LAB ONLY — lab scenario S4, "consume first, then work": the token is DELETEd when the submit starts,
// before the business step has succeeded. If that step then fails (too few points, a crash, a timeout),
// the token is gone and the redeem never happened: the user can never submit that form again and gets
// 400 form_token_invalid for trying. Used only by the unsafe redeem route that lab mode mounts
// (internal/rewards/redeem_unsafe.go). Compare consumeFirstScript with beginScript in formtoken.go: the
// owner check is the same; the guard is moving the token to IN_FLIGHT under a lease instead of deleting
// it, so that Release (business failure) or the lease running out (crash) make it usable again.

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// consumeFirstScript checks the token like beginScript, then deletes it. Being one script, it still
// lets only one of several concurrent submits through: the failure it shows is not a race, it is that
// the delete comes before the work.
//
// KEYS[1] token hash, KEYS[2] lease; ARGV[1] user, ARGV[2] form.
var consumeFirstScript = redis.NewScript(`
local t = redis.call('HMGET', KEYS[1], 'user', 'form')
if not t[1] or t[1] ~= ARGV[1] or t[2] ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1`)

// ConsumeFirst deletes token id if userID may use it for form, and returns ErrInvalid otherwise. There is
// no way back: whatever the caller's work does next, the token no longer exists. LAB ONLY.
func (s *Store) ConsumeFirst(ctx context.Context, id string, userID int64, form string) error {
	if !ValidID(id) {
		return ErrInvalid
	}
	n, err := consumeFirstScript.Run(ctx, s.rdb, []string{s.TokenKey(id), s.LeaseKey(id)},
		strconv.FormatInt(userID, 10), form).Int()
	if err != nil {
		return fmt.Errorf("consume form token: %w", err)
	}
	if n == 0 {
		return ErrInvalid
	}
	return nil
}
