// Package gzipped is the compression of the payloads both halves exchange
// in ConfigMaps (rule snapshot shards, the route table): gzip on the way in,
// and on the way out a bounded gunzip, so that a payload that expands to
// gigabytes (a gzip bomb) costs a reader at most the bound. It imports
// nothing from this module.
package gzipped

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// ErrTooLarge is returned by Decompress for a payload that expands past its
// bound.
var ErrTooLarge = errors.New("more bytes uncompressed than the bound")

// Compress gzips raw at level (gzip.BestSpeed ... gzip.BestCompression).
func Compress(raw []byte, level int) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Decompress gunzips data, reading at most limit bytes of output: more is
// ErrTooLarge. Data that is not gzip is an error that says so.
func Decompress(data []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not gzip data: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing: %w", err)
	}
	if len(raw) > limit {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
	}
	return raw, nil
}
