package limiter

import "strings"

// Slot is the Redis Cluster hash slot of key, as Redis computes it (CLUSTER
// KEYSLOT): CRC16 (XMODEM) of the key's hash tag, the text between its
// first '{' and the first '}' after it when that is not empty, else of the
// whole key, modulo 16384.
func Slot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

// bucketSlot is the slot of the bucket named key, and whether every key
// a script call of the bucket touches is in it: the hash that holds the
// bucket (Storage) and the key of its 0.1 form, which share the hash tag
// of the bucket's name.
func bucketSlot(key string) (uint16, bool) {
	hash, _ := Storage(key)
	slot := Slot(key)
	return slot, Slot(hash) == slot
}
