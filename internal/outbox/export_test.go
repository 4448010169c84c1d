package outbox

// SetBeforeMark installs a hook that runs after the confirms and before the rows are marked; an error
// rolls the batch back, as a crash at that point would. Tests only.
func SetBeforeMark(r *Relay, f func() error) { r.beforeMark = f }
