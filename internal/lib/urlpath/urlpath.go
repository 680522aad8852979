// Package urlpath holds the request path and host checks both route tables
// (the routes file, dataplane/routes, and Gateway API HTTPRoutes,
// dataplane/httproutes) match with.
package urlpath

import "strings"

// PrefixMatch reports whether the clean path p is prefix or below it,
// segment-aware: /orders matches /orders and /orders/1, not /ordersx.
// prefix has no trailing slash unless it is "/".
func PrefixMatch(prefix, p string) bool {
	if prefix == "/" {
		return true
	}
	return strings.HasPrefix(p, prefix) && (len(p) == len(prefix) || p[len(prefix)] == '/')
}

// Clean reports whether p starts with "/" and has no empty, "." or ".."
// segment; a trailing slash is allowed.
func Clean(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch p[start:i] {
		case ".", "..":
			return false
		case "":
			if i < len(p) {
				return false
			}
		}
		start = i + 1
	}
	return true
}

// Host strips the port and one trailing dot from a request Host (an IPv6
// literal keeps its brackets). Case is left as it is.
func Host(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			return h[:i+1]
		}
		return h
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}
