package replay

// ShopBody is shopBody for the tests, which compare it with internal/callback's Callback.
type ShopBody = shopBody
