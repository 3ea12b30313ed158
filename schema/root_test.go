package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// secretText is in the file outside the folder: no error may quote it.
const secretText = "SECRET-OUTSIDE-THE-FOLDER"

// outsideFile writes a valid schema (so that reading it would succeed)
// in a folder of its own and returns its path and that folder's.
func outsideFile(t *testing.T) (file, dir string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "secret.json")
	if err := os.WriteFile(file, []byte(`{"type":"object","title":"`+secretText+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, dir
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
}

// wantRefused: err refuses the path named, without the outside file's text.
func wantRefused(t *testing.T, what string, err error, path string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: read a file outside its folder through a symbolic link", what)
	case !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "outside"):
		t.Errorf("%s: %v, want an error naming %s as outside the folder", what, err, path)
	case strings.Contains(err.Error(), secretText):
		t.Errorf("%s: the error quotes the outside file: %v", what, err)
	}
}

// Dir reads no file outside its folder: a schema symlinked outside (by a
// relative or an absolute link, or through a symlinked directory) is an
// error naming it. Symbolic links that stay inside still work, absolute
// ones included.
func TestDirRefusesASymlinkLeavingTheFolder(t *testing.T) {
	secret, outside := outsideFile(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "orders"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "orders", "created.json"), []byte(orderSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	symlink(t, "created.json", filepath.Join(dir, "orders", "placed.json"))
	symlink(t, filepath.Join(dir, "orders", "created.json"), filepath.Join(dir, "orders", "paid.json"))
	if _, err := New(Dir(dir)); err != nil {
		t.Fatalf("symbolic links inside the folder: %v", err)
	}
	for name, target := range map[string]string{
		"relative": mustRel(t, filepath.Join(dir, "orders"), secret),
		"absolute": secret,
	} {
		link := filepath.Join(dir, "orders", "leak.json")
		symlink(t, target, link)
		_, err := New(Dir(dir))
		wantRefused(t, name, err, "orders/leak.json")
		// A folder of links into another tree by design is read through
		// os.DirFS, which follows them (docs/schemas.md).
		if _, err := New(FS(os.DirFS(dir), ".")); err != nil {
			t.Errorf("%s: FS(os.DirFS(dir), \".\") refused the link: %v", name, err)
		}
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := New(Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(reg.URNs(), " "); got != "urn:babel:orders:created urn:babel:orders:paid urn:babel:orders:placed" {
		t.Errorf("URNs %q", got)
	}
	// A symlinked directory is not walked (fs.WalkDir does not follow it);
	// one named like a schema is refused, not read.
	symlink(t, outside, filepath.Join(dir, "x.json"))
	_, err = New(Dir(dir))
	wantRefused(t, "a directory link", err, "x.json")
}

// RegistryFile and CheckRegistryCompatibility read no file outside the
// manifest's folder: an entry's schema symlinked outside, an entry's path
// through a symlinked directory, or the manifest itself symlinked outside
// is an error naming it. Symbolic links inside the folder still work.
func TestRegistryFileRefusesASymlinkLeavingTheFolder(t *testing.T) {
	secret, outside := outsideFile(t)
	const entries = `{"schemas":[{"urn":"urn:babel:orders:created","schema":"schemas/order.json"},` +
		`{"urn":"urn:babel:orders:placed","schema":"%s"}]}`
	manifest := writeRegistry(t, strings.Replace(entries, "%s", "alias/placed.json", 1),
		map[string]string{"schemas/order.json": orderSchema})
	dir := filepath.Dir(manifest)
	symlink(t, "schemas", filepath.Join(dir, "alias"))
	symlink(t, "order.json", filepath.Join(dir, "schemas", "placed.json"))
	if _, err := New(RegistryFile(manifest)); err != nil {
		t.Fatalf("symbolic links inside the folder: %v", err)
	}
	if _, err := CheckRegistryCompatibility(manifest, manifest); err != nil {
		t.Fatalf("symbolic links inside the folder, compared: %v", err)
	}
	symlink(t, secret, filepath.Join(dir, "schemas", "leak.json"))
	symlink(t, outside, filepath.Join(dir, "out"))
	symlink(t, secret, filepath.Join(dir, "linked.json"))
	for _, p := range []string{"schemas/leak.json", "out/secret.json"} {
		bad := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(bad, []byte(strings.Replace(entries, "%s", p, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := New(RegistryFile(bad))
		wantRefused(t, p, err, p)
		_, err = CheckRegistryCompatibility(manifest, bad)
		wantRefused(t, p+", compared", err, p)
	}
	_, err := New(RegistryFile(filepath.Join(dir, "linked.json")))
	wantRefused(t, "the manifest", err, "linked.json")
}

func mustRel(t *testing.T, base, target string) string {
	t.Helper()
	rel, err := filepath.Rel(base, target)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}
