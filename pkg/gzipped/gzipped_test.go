package gzipped

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	raw := []byte(strings.Repeat(`{"tenant":"shop-a"}`, 100))
	for _, level := range []int{gzip.BestSpeed, gzip.BestCompression} {
		z, err := Compress(raw, level)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decompress(z, len(raw))
		if err != nil || !bytes.Equal(got, raw) {
			t.Errorf("level %d: Decompress(Compress(raw)) = %d bytes, %v; want the %d bytes back", level, len(got), err, len(raw))
		}
	}
}

func TestDecompressBounds(t *testing.T) {
	bomb, err := Compress(make([]byte, 10<<20), gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decompress(bomb, 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("10 MiB under a 1 MiB bound: %v, want ErrTooLarge", err)
	}
	if _, err := Decompress([]byte("not gzip"), 1<<20); err == nil || !strings.Contains(err.Error(), "not gzip data") {
		t.Errorf("plain bytes: %v, want a not-gzip error", err)
	}
	if _, err := Compress(nil, 42); err == nil {
		t.Error("level 42: no error")
	}
}
