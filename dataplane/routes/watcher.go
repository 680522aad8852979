package routes

import "github.com/tollgate-dev/tollgate/internal/lib/filewatch"

// WatcherOptions configures a Watcher. The zero value is usable: the file
// is read every second.
type WatcherOptions = filewatch.Options[Table]

// Watcher keeps a Table loaded from a file up to date (see package
// filewatch: polling, content hashes, last good table kept).
type Watcher = filewatch.Watcher[Table]

// NewWatcher loads the file at path and returns a Watcher serving it; it
// fails if the file cannot be read or is invalid. Call Run to follow changes.
func NewWatcher(path string, opts WatcherOptions) (*Watcher, error) {
	return filewatch.New(path, maxFileSize, Parse, opts)
}
