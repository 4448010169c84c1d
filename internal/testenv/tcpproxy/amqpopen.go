package tcpproxy

import "encoding/binary"

// StallAfterAMQPOpen makes every connection accepted from now on stall, as Stall does, once the broker's
// connection.open-ok has reached the client: a broker that completes the AMQP handshake and then says
// nothing. Connections open now are left as they are. Proxies of ForURL and New only.
func (p *Proxy) StallAfterAMQPOpen() { p.afterOpen.Store(true) }

// openOkWatcher reads the broker's side of an AMQP connection frame by frame (type, channel, size,
// payload, end byte) until connection.open-ok (a method frame of class 10, method 41).
type openOkWatcher struct {
	frame []byte // the frame read so far
}

// feed takes the broker's next bytes. It reports whether connection.open-ok ends in them, and where:
// the bytes up to end are the client's; what follows is not.
func (w *openOkWatcher) feed(b []byte) (end int, ok bool) {
	for i, c := range b {
		w.frame = append(w.frame, c)
		if len(w.frame) < 7 {
			continue
		}
		size := int(binary.BigEndian.Uint32(w.frame[3:7]))
		if len(w.frame) < 7+size+1 {
			continue
		}
		f := w.frame
		w.frame = nil
		if f[0] == 1 && size >= 4 && binary.BigEndian.Uint16(f[7:9]) == 10 && binary.BigEndian.Uint16(f[9:11]) == 41 {
			return i + 1, true
		}
	}
	return len(b), false
}
