package lua

import _ "embed"

// Reset sets one bucket, or its quota's count, to full or to a number of
// tokens (tollgate reset); see reset.lua for its keys, arguments and
// reply.
//
//go:embed reset.lua
var Reset string
