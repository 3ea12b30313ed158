package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// errOutside is the refusal of a file that a symbolic link puts outside
// the folder being read (the link's target is never read, nor quoted).
var errOutside = errors.New("leads outside the folder through a symbolic link")

// inFolder calls read with the folder dir as an fs.FS that reads nothing
// outside it (Dir, RegistryFile and CheckRegistryCompatibility read
// through it): every open goes through an os.Root, which refuses a
// symbolic link, or a path through a symlinked directory, that leaves the
// folder. The root holds a file descriptor for the one load only: it is
// opened here and closed when read returns, so a Source holds none
// between the New calls that load it. what begins the error of a folder
// that cannot be opened.
func inFolder(dir, what string, read func(fs.FS) error) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = root.Close() }() // a directory opened for reading: closing it reports nothing to act on
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // so that an absolute link's target compares with it
	}
	return read(folderFS{fsys: root.FS(), dir: dir})
}

// folderFS is an os.Root's fs.FS that also follows an absolute symbolic
// link to a file inside the folder (which os.Root refuses as it refuses
// every absolute link, though os.DirFS read it), and says which path a
// link took outside.
type folderFS struct {
	fsys fs.FS
	dir  string
}

func (f folderFS) Open(name string) (fs.File, error) {
	file, err := f.fsys.Open(name)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Op == "openat" {
		pe.Op = "open" // the system call's name: os.DirFS said open, and so do errors here
	}
	if err == nil || errors.Is(err, fs.ErrNotExist) || !fs.ValidPath(name) {
		return file, err
	}
	// Resolved only to choose the error or the path inside: the open
	// below goes through the root again, which refuses any escape that a
	// change made meanwhile would open.
	switch inside, ok := f.resolve(name); {
	case !ok:
		return nil, &fs.PathError{Op: "open", Path: name, Err: errOutside}
	case inside != "" && inside != name:
		return f.fsys.Open(inside)
	}
	return nil, err
}

// resolve follows name's symbolic links: its path below the folder and
// true when it stays inside; "" and true when it cannot be resolved (the
// root's own error stands); false when it leaves the folder.
func (f folderFS) resolve(name string) (string, bool) {
	base, err := filepath.EvalSymlinks(f.dir)
	if err != nil {
		return "", true
	}
	target, err := filepath.EvalSymlinks(filepath.Join(f.dir, filepath.FromSlash(name)))
	if err != nil {
		return "", true
	}
	rel, err := filepath.Rel(base, target)
	if err != nil || !filepath.IsLocal(rel) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}
