package outbox

// SetBeforeMark installs a hook that runs after the confirms and before the rows are marked; an error
// rolls the batch back, as a crash at that point would. Tests only.
func SetBeforeMark(r *Relay, f func() error) { r.beforeMark = f }

// SetBeforeListen installs a hook that runs before each listen connection is opened; an error fails
// that attempt, as an unreachable database would. Tests only.
func SetBeforeListen(r *Relay, f func() error) { r.beforeListen = f }

// PendingWakeUps returns the wake-ups waiting for the publishing loop (0 or 1). Tests only.
func PendingWakeUps(r *Relay) int { return len(r.wake) }

// DropWakeUp takes the pending wake-up, if any, without a drain. Tests only.
func DropWakeUp(r *Relay) {
	select {
	case <-r.wake:
	default:
	}
}
