// Package keycount holds no code, only tests: they run the shop in-process, create and pay orders, and
// count the Redis keys left behind, by pattern, with their TTLs. Every key the shop writes must expire
// (docs/reliability.md, "Redis keys"). KEYCOUNT_ORDERS sets the number of orders (default 20).
package keycount
