package httproutes

import (
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/routetable"
)

// The filters of an HTTPRoute rule: RequestHeaderModifier and URLRewrite
// (Rule.Rewrite), RequestRedirect (Rule.Redirect).

// modifyHeaders applies a RequestHeaderModifier: set, then add, then remove.
func modifyHeaders(hd http.Header, f *routetable.Filter) {
	for _, nv := range f.Set {
		hd.Set(nv.Name, nv.Value)
	}
	for _, nv := range f.Add {
		hd.Add(nv.Name, nv.Value)
	}
	for _, name := range f.Remove {
		hd.Del(name)
	}
}

// rewritePath applies a path modifier to the request path p, which matched m.
func rewritePath(p string, f *routetable.Filter, m *routetable.Match) string {
	if p == "" {
		p = "/"
	}
	switch f.PathType {
	case routetable.ReplaceFullPath:
		return f.PathValue
	case routetable.ReplacePrefixMatch:
		if m == nil || m.PathType != routetable.PathPrefix {
			return p
		}
		rest := p
		if m.PathValue != "/" {
			rest = p[len(m.PathValue):]
		}
		out := f.PathValue
		switch {
		case rest == "" || rest == "/" && strings.HasSuffix(out, "/"):
		case strings.HasSuffix(out, "/"):
			out += rest[1:]
		default:
			out += rest
		}
		if out == "" {
			out = "/"
		}
		return out
	}
	return p
}

// redirect answers a RequestRedirect filter f for a request r that matched m
// (nil: unknown).
func redirect(w http.ResponseWriter, r *http.Request, f *routetable.Filter, m *routetable.Match) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host, port := r.Host, ""
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		host, port = h, p
	}
	if f.Scheme != "" && f.Scheme != scheme {
		scheme, port = f.Scheme, ""
	}
	if f.Hostname != "" {
		host = f.Hostname
	}
	if f.Port != 0 {
		port = strconv.Itoa(int(f.Port))
	}
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		port = ""
	}
	path := r.URL.Path
	if f.PathType != "" {
		path = rewritePath(path, f, m)
	}
	loc := scheme + "://" + host
	if port != "" {
		loc = scheme + "://" + net.JoinHostPort(host, port)
	}
	u := *r.URL
	u.Scheme, u.Host, u.Path, u.RawPath = "", "", path, ""
	loc += u.RequestURI()
	code := f.StatusCode
	if code == 0 {
		code = http.StatusFound
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(code)
}
