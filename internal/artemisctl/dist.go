package artemisctl

import (
	"archive/zip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// mavenRepo is the Maven repository the zip is fetched into:
// MAVEN_REPO_LOCAL, else $HOME/.m2/repository.
func (c *Ctl) mavenRepo() string {
	if r := c.getenv("MAVEN_REPO_LOCAL"); r != "" {
		return r
	}
	return filepath.Join(c.getenv("HOME"), ".m2", "repository")
}

// ZipPath is where Maven puts the distribution's zip.
func (c *Ctl) ZipPath() string {
	return filepath.Join(c.mavenRepo(), "org", "apache", "activemq", "apache-artemis", Version,
		"apache-artemis-"+Version+"-bin.zip")
}

// progress runs cmd with its output in logFile; while it runs it logs
// "LABEL: still running (N s)" every 20 s.
func (c *Ctl) progress(logName, label, logFile string, cmd *exec.Cmd) error {
	f, err := os.Create(logFile)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	cmd.Stdout, cmd.Stderr = f, f
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				c.logf(logName, "%s: done in %d s", label, int(time.Since(t0)/time.Second))
			}
			return err
		case <-tick.C:
			c.logf(logName, "%s: still running (%d s)", label, int(time.Since(t0)/time.Second))
		}
	}
}

// tailFile copies the last n lines of path to stderr.
func (c *Ctl) tailFile(path string, n int) {
	lines := readLines(path)
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) > 0 {
		c.rawStderr(strings.Join(lines, "\n") + "\n")
	}
}

// EnsureDist fetches the distribution with Maven (once; Maven caches it)
// and unpacks it into <root>/.artemis, under the lock "dist".
func (c *Ctl) EnsureDist(logName string) error {
	unlock, err := c.lock(logName, "dist")
	if err != nil {
		return err
	}
	defer unlock()
	if exists(filepath.Join(c.Dist, ".babelqueue-unpacked")) && isExecutable(filepath.Join(c.Dist, "bin", "artemis")) {
		return nil
	}
	artifact := "org.apache.activemq:apache-artemis:" + Version + ":zip:bin"
	zipFile := c.ZipPath()
	if err := os.MkdirAll(c.Base, 0o755); err != nil {
		return c.die(logName, "%v", err)
	}
	// Java (and so Maven) takes its home directory from the password
	// database, not from $HOME: name the repository explicitly, so that the
	// zip lands where ZipPath looks.
	mvnArgs := []string{"-B", "-Dstyle.color=never", "-Dmaven.repo.local=" + c.mavenRepo()}
	mavenLog := filepath.Join(c.Base, "maven.log")
	mvn := func(args ...string) *exec.Cmd {
		cmd := exec.Command("mvn", append(append([]string(nil), mvnArgs...), args...)...)
		cmd.Env = c.env
		return cmd
	}
	if !exists(zipFile) {
		c.logf(logName, "fetching %s with Maven (about 60 MB, once; cached in %s) ...", artifact, c.mavenRepo())
		if err := c.progress(logName, "mvn dependency:get", mavenLog,
			mvn("dependency:get", "-Dartifact="+artifact, "-Dtransitive=false")); err != nil {
			c.tailFile(mavenLog, 40)
			return c.die(logName, "mvn dependency:get %s failed (full log: %s)", artifact, mavenLog)
		}
	}
	if !exists(zipFile) {
		// A settings.xml with another localRepository: let Maven copy it out.
		dl := filepath.Join(c.Base, "download")
		if err := os.MkdirAll(dl, 0o755); err != nil {
			return c.die(logName, "%v", err)
		}
		zipFile = filepath.Join(dl, "apache-artemis-"+Version+"-bin.zip")
		if !exists(zipFile) {
			if err := c.progress(logName, "mvn dependency:copy", mavenLog,
				mvn("dependency:copy", "-Dartifact="+artifact, "-DoutputDirectory="+dl)); err != nil {
				c.tailFile(mavenLog, 40)
				return c.die(logName, "mvn dependency:copy %s failed (full log: %s)", artifact, mavenLog)
			}
		}
		if !exists(zipFile) {
			return c.die(logName, "Maven did not produce %s", zipFile)
		}
	}
	c.logf(logName, "unpacking %s into %s ...", filepath.Base(zipFile), c.Base)
	tmp := filepath.Join(c.Base, fmt.Sprintf(".unpack.%d", os.Getpid()))
	_ = os.RemoveAll(tmp)
	_ = os.RemoveAll(c.Dist)
	if err := unzip(zipFile, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return c.die(logName, "unpacking %s failed (corrupt download? delete it and retry): %v", zipFile, err)
	}
	top := filepath.Join(tmp, "apache-artemis-"+Version)
	if st, err := os.Stat(top); err != nil || !st.IsDir() {
		_ = os.RemoveAll(tmp)
		return c.die(logName, "%s does not contain apache-artemis-%s/", zipFile, Version)
	}
	if bins, err := filepath.Glob(filepath.Join(top, "bin", "*")); err == nil {
		for _, b := range bins {
			if st, err := os.Stat(b); err == nil && !st.IsDir() {
				_ = os.Chmod(b, st.Mode().Perm()|0o111)
			}
		}
	}
	if err := os.Rename(top, c.Dist); err != nil {
		return c.die(logName, "%v", err)
	}
	_ = os.Remove(tmp)
	if err := os.WriteFile(filepath.Join(c.Dist, ".babelqueue-unpacked"), nil, 0o644); err != nil {
		return c.die(logName, "%v", err)
	}
	return nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode().Perm()&0o111 != 0
}

// unzip extracts zipFile into dir, keeping the files' modes; it refuses
// entries that would land outside dir.
func unzip(zipFile, dir string) error {
	r, err := zip.OpenReader(zipFile)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	for _, f := range r.File {
		path := filepath.Join(dir, f.Name)
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%s: entry %q is outside the archive's directory", zipFile, f.Name)
		}
		if f.FileInfo().IsDir() {
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		mode := f.Mode().Perm()
		if mode == 0 {
			mode = 0o644
		}
		if err := extractFile(f, path, mode); err != nil {
			return err
		}
	}
	return nil
}

func extractFile(f *zip.File, path string, mode os.FileMode) error {
	rc, err := f.Open()
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, rc); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// created reports whether the instance is complete: ensure keeps it.
func (i *Instance) created() bool {
	return exists(filepath.Join(i.Dir, "etc", "broker.xml")) && isExecutable(filepath.Join(i.Dir, "bin", "artemis")) && exists(i.state)
}

// ensure creates the instance (artemis create) unless it exists: the
// credentials of ARTEMIS_USER/ARTEMIS_PASSWORD (default babel/babel), host
// 127.0.0.1, NIO journal, no web console, only the CORE and AMQP acceptors.
func (i *Instance) ensure() error {
	if i.created() {
		u := i.Get("USER")
		if eu := i.c.getenv("ARTEMIS_USER"); eu != "" && eu != u {
			i.logf("note: instance was created with user '%s'; ARTEMIS_USER=%s is ignored (run 'reset' to change)", u, eu)
		}
		return nil
	}
	user, password := i.c.getenv("ARTEMIS_USER"), i.c.getenv("ARTEMIS_PASSWORD")
	if user == "" {
		user = "babel"
	}
	if password == "" {
		password = "babel"
	}
	i.logf("creating instance %s (user %s) ...", i.Dir, user)
	if err := os.RemoveAll(i.Dir); err != nil {
		return i.die("%v", err)
	}
	if err := os.MkdirAll(filepath.Dir(i.Dir), 0o755); err != nil {
		return i.die("%v", err)
	}
	xmx := i.c.getenv("ARTEMIS_JAVA_XMX")
	if xmx == "" {
		xmx = "1g"
	}
	args := []string{"create", "--silent", "--user", user, "--password", password, "--role", "amq", "--require-login",
		"--host", "127.0.0.1", "--name", "babelqueue-" + i.Name, "--no-web", "--nio"}
	if i.c.getenv("ARTEMIS_FSYNC") != "true" {
		args = append(args, "--no-fsync")
	}
	args = append(args, "--no-autotune", "--no-hornetq-acceptor", "--no-mqtt-acceptor", "--no-stomp-acceptor",
		"--java-memory", xmx, i.Dir)
	createLog := filepath.Join(i.c.Base, "create-"+i.Name+".log")
	out, err := os.Create(createLog)
	if err != nil {
		return i.die("%v", err)
	}
	cmd := exec.Command(filepath.Join(i.c.Dist, "bin", "artemis"), args...)
	cmd.Env = i.c.childEnv()
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	_ = out.Close()
	if err != nil {
		if b, rerr := os.ReadFile(createLog); rerr == nil {
			i.c.rawStderr(string(b))
		}
		return i.die("artemis create failed")
	}
	if err := i.writeState("", "", user, password); err != nil {
		return i.die("%v", err)
	}
	return nil
}
