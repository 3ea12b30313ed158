package artemisctl

import (
	"archive/zip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeZip writes a zip of the entries (name -> mode; a name ending in /
// is a directory).
func writeZip(t *testing.T, path string, entries map[string]os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, mode := range entries {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(name, "/") {
			_, _ = w.Write([]byte("#!/bin/sh\n"))
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureDistUnpacksTheMavenZipOnce(t *testing.T) {
	repo := t.TempDir()
	c, _, errb := testCtl(t, "MAVEN_REPO_LOCAL="+repo)
	zipFile := c.ZipPath()
	if want := filepath.Join(repo, "org/apache/activemq/apache-artemis", Version, "apache-artemis-"+Version+"-bin.zip"); zipFile != want {
		t.Fatalf("ZipPath = %s, want %s", zipFile, want)
	}
	top := "apache-artemis-" + Version + "/"
	writeZip(t, zipFile, map[string]os.FileMode{top: os.ModeDir | 0o755, top + "bin/artemis": 0o644, top + "lib/x.jar": 0o644})
	if err := c.EnsureDist("t"); err != nil {
		t.Fatalf("EnsureDist: %v (%s)", err, errb)
	}
	if !isExecutable(filepath.Join(c.Dist, "bin", "artemis")) || !exists(filepath.Join(c.Dist, ".babelqueue-unpacked")) || !exists(filepath.Join(c.Dist, "lib", "x.jar")) {
		t.Fatalf("the distribution is not unpacked right into %s", c.Dist)
	}
	if !strings.Contains(errb.String(), "unpacking apache-artemis-"+Version+"-bin.zip") {
		t.Errorf("stderr: %s", errb)
	}
	errb.Reset()
	if err := c.EnsureDist("t"); err != nil || errb.Len() != 0 {
		t.Errorf("a second EnsureDist: %v, stderr %q; want nothing done", err, errb)
	}
}

func TestEnsureDistRefusesAZipWithoutTheDistribution(t *testing.T) {
	repo := t.TempDir()
	c, _, errb := testCtl(t, "MAVEN_REPO_LOCAL="+repo)
	writeZip(t, c.ZipPath(), map[string]os.FileMode{"other/file": 0o644})
	if err := c.EnsureDist("t"); ExitCode(err) != 1 || !strings.Contains(errb.String(), "does not contain apache-artemis-"+Version+"/") {
		t.Fatalf("err %v, stderr %q", err, errb)
	}
}

func TestUnzipRefusesEntriesOutsideItsDirectory(t *testing.T) {
	dir := t.TempDir()
	z := filepath.Join(dir, "evil.zip")
	writeZip(t, z, map[string]os.FileMode{"../evil": 0o644})
	if err := unzip(z, filepath.Join(dir, "out")); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("err = %v", err)
	}
	if exists(filepath.Join(dir, "evil")) {
		t.Fatal("the entry was written outside the directory")
	}
}
