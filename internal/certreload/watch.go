package certreload

import (
	"context"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settle is how long Run waits after a file event for the rest of a change
// (a writer's several writes, the kubelet's new directory, symlink swap and
// removal of the old directory) before it reads the files.
const settle = 100 * time.Millisecond

// Run watches the files and reloads them when they change, until ctx is
// done: on file events (after a quiet settle of 100 ms) and every Poll.
// Without fsnotify (its watcher cannot be made) it logs one warning and
// polls. Call it once.
func (r *Reloader) Run(ctx context.Context) {
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
		w      *fsnotify.Watcher
	)
	if !r.noWatch {
		var err error
		w, err = fsnotify.NewWatcher()
		if err != nil {
			r.o.Log.Warn("tls file watch unavailable; polling the files only",
				"poll", r.o.Poll, "error", err.Error())
		} else {
			defer w.Close()
			events, errs = w.Events, w.Errors
			r.watch(w)
		}
	}
	r.check() // what changed since New, now that the watches are set
	if r.running != nil {
		r.running()
	}

	poll := time.NewTicker(r.o.Poll)
	defer poll.Stop()
	quiet := time.NewTimer(settle)
	quiet.Stop()
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
			} else if ev.Op != fsnotify.Chmod {
				quiet.Reset(settle)
			}
			continue
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// An overflow loses events: look at the files.
			r.o.Log.Warn("tls file watch", "error", err.Error())
		case <-quiet.C:
		case <-poll.C:
		}
		r.check()
		// A directory watched only now (the symlinks moved to it) may
		// have changed between the check and its watch: look again, a
		// few times at most while the symlinks keep moving.
		for i := 0; i < 3 && r.watch(w); i++ {
			r.check()
		}
	}
}

// watch makes w watch the directory of each file and the directory each
// resolves to through its symlinks (in a Secret volume, the timestamped
// directory ..data points to), and no other: a directory the kubelet
// replaced is dropped and its successor added. A directory that cannot be
// watched now is tried again on the next call. It reports whether it added
// a directory. w nil does nothing.
func (r *Reloader) watch(w *fsnotify.Watcher) (added bool) {
	if w == nil {
		return false
	}
	var want []string
	for _, f := range []string{r.o.CertFile, r.o.KeyFile, r.o.ClientCAFile} {
		if f == "" {
			continue
		}
		want = append(want, filepath.Dir(f))
		if real, err := filepath.EvalSymlinks(f); err == nil {
			want = append(want, filepath.Dir(real))
		}
	}
	have := w.WatchList()
	for _, d := range want {
		if !slices.Contains(have, d) {
			if err := w.Add(d); err != nil {
				r.o.Log.Debug("tls file watch", "dir", d, "error", err.Error())
				continue
			}
			have = append(have, d)
			added = true
		}
	}
	for _, d := range have {
		if !slices.Contains(want, d) {
			_ = w.Remove(d) // it may be gone with its directory
		}
	}
	return added
}
