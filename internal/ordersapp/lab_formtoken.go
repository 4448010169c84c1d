package ordersapp

// mountLabFormToken mounts the unsafe twin of the one-time form token (S4).
func mountLabFormToken(p labParts) error { return nil }
