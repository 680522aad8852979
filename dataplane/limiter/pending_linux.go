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
