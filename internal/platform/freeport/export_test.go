package freeport

// Handed reports whether Addr has returned port in this process.
func Handed(port int) bool {
	handed.Lock()
	defer handed.Unlock()
	return handed.ports[port]
}
