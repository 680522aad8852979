package limiter

import "golang.org/x/sys/unix"

// pendingBytes is the number of bytes received on socket fd and not read
// yet (SIOCINQ), 0 when unknown.
func pendingBytes(fd uintptr) int {
	n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	if err != nil {
		return 0
	}
	return n
}

// peerClosed reports whether socket fd is no longer usable for a new
// request: the peer closed or reset it, or (unless mayHoldData: TLS
// records such as session tickets) it holds bytes nobody asked for.
// Nothing is consumed.
func peerClosed(fd uintptr, mayHoldData bool) bool {
	var b [1]byte
	n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return false
	case err != nil, n == 0:
		return true
	}
	return !mayHoldData
}
