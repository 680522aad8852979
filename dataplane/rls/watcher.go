package rls

import "github.com/tollgate-dev/tollgate/internal/lib/filewatch"

// WatcherOptions configure a DomainsWatcher. The zero value is usable.
type WatcherOptions = filewatch.Options[Domains]

// DomainsWatcher keeps a domain configuration loaded from a file up to date,
// polling and comparing content hashes like the route watcher.
type DomainsWatcher = filewatch.Watcher[Domains]

// NewDomainsWatcher loads the file at path; it fails if the file cannot be
// read or is invalid. Call Run to follow changes.
func NewDomainsWatcher(path string, opts WatcherOptions) (*DomainsWatcher, error) {
	return filewatch.New(path, maxFileSize, ParseDomains, opts)
}
