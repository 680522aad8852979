package packaging_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The CA bundle the image takes from the build machine (Debian's
// ca-certificates).
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// ociDescriptor is a content descriptor of the OCI image spec.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

// ociConfig is the part of an OCI image config the tests read.
type ociConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		User         string              `json:"User"`
		Env          []string            `json:"Env"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
}

// TestImage builds the image as `make image` does (hack/image, no Docker
// daemon), reads the OCI layout it writes with nothing but the OCI spec,
// unpacks the layers, and checks the image against the Dockerfile: entrypoint,
// user 65532, labels, ports, the CA bundle, no shell; then runs the binary
// from the unpacked filesystem.
func TestImage(t *testing.T) {
	bin := imageBinary(t)
	if _, err := os.Stat(hostCABundle); err != nil {
		t.Fatalf("the image takes the CA bundle from %s (Debian's ca-certificates): %v", hostCABundle, err)
	}
	version := releaseVersion(t)
	dir := t.TempDir()
	tool := filepath.Join(dir, "image-tool")
	if _, err := run(repoPath("hack", "image"), nil, nil, "go", "build", "-o", tool, "."); err != nil {
		t.Fatal(err)
	}
	ref := "registry.example.test/team/tollgate:" + version
	layoutDir, tarPath := filepath.Join(dir, "layout"), filepath.Join(dir, "image.tar")
	if _, err := run(dir, nil, nil, tool, "-binary", bin, "-platform", "linux/"+runtime.GOARCH, "-ref", ref,
		"-version", version, "-revision", imageCommit, "-created", imageBuildDate,
		"-oci-layout", layoutDir, "-tarball", tarPath); err != nil {
		t.Fatal(err)
	}

	// The OCI layout: oci-layout, index.json, then blobs by digest.
	var marker struct {
		Version string `json:"imageLayoutVersion"`
	}
	readJSON(t, filepath.Join(layoutDir, "oci-layout"), &marker)
	if marker.Version != "1.0.0" {
		t.Errorf("oci-layout version %q", marker.Version)
	}
	var index struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	readJSON(t, filepath.Join(layoutDir, "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1", len(index.Manifests))
	}
	if m := index.Manifests[0]; m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Annotations["org.opencontainers.image.ref.name"] != ref {
		t.Errorf("index.json manifest %+v: want an OCI manifest named %s", m, ref)
	}
	var manifest struct {
		MediaType string          `json:"mediaType"`
		Config    ociDescriptor   `json:"config"`
		Layers    []ociDescriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, layoutDir, index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Errorf("config media type %q", manifest.Config.MediaType)
	}
	var cfg ociConfig
	if err := json.Unmarshal(blob(t, layoutDir, manifest.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, l := range manifest.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("layer media type %q", l.MediaType)
		}
		unpackLayer(t, blob(t, layoutDir, l), rootfs)
	}

	// The config, against the Dockerfile.
	if cfg.OS != "linux" || cfg.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{"/tollgate"}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q: want exactly [/tollgate] (exec form: no shell)", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	df := readDockerfile(t)
	wantLabels := map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": imageCommit,
		"org.opencontainers.image.created":  imageBuildDate,
	}
	var dfPorts []string
	for _, in := range df {
		switch in.cmd {
		case "USER":
			if cfg.Config.User != in.args {
				t.Errorf("user %q, the Dockerfile says %q", cfg.Config.User, in.args)
			}
		case "ENTRYPOINT":
			var ep []string
			if err := json.Unmarshal([]byte(in.args), &ep); err != nil || !slices.Equal(ep, cfg.Config.Entrypoint) {
				t.Errorf("entrypoint %q, the Dockerfile says %s", cfg.Config.Entrypoint, in.args)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				dfPorts = append(dfPorts, p+"/tcp")
			}
		case "LABEL":
			for k, v := range dockerfileLabels(t, in.args) {
				wantLabels[k] = v
			}
		}
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cfg.Config.User)
	}
	var ports []string
	for p := range cfg.Config.ExposedPorts {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	slices.Sort(dfPorts)
	if len(dfPorts) == 0 || !slices.Equal(ports, dfPorts) {
		t.Errorf("exposed ports %v, the Dockerfile exposes %v", ports, dfPorts)
	}
	if len(wantLabels) < 6 {
		t.Errorf("the Dockerfile has too few labels: %v", wantLabels)
	}
	for k, v := range wantLabels {
		if got := cfg.Config.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	if !slices.Contains(cfg.Config.Env, "SSL_CERT_FILE="+hostCABundle) {
		t.Errorf("env %q: want SSL_CERT_FILE=%s", cfg.Config.Env, hostCABundle)
	}

	// The filesystem: the binary, the nonroot user, the CA bundle, no shell.
	fi, err := os.Stat(filepath.Join(rootfs, "tollgate"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("/tollgate: %v %v", fi, err)
	}
	passwd, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	if err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no user 65532: %q %v", passwd, err)
	}
	want, _ := os.ReadFile(hostCABundle)
	got, err := os.ReadFile(filepath.Join(rootfs, "etc", "ssl", "certs", "ca-certificates.crt"))
	if err != nil || !bytes.Equal(got, want) || !bytes.Contains(got, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("the image's CA bundle is not %s: %v", hostCABundle, err)
	}
	for _, sh := range []string{"bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"} {
		if _, err := os.Lstat(filepath.Join(rootfs, sh)); err == nil {
			t.Errorf("the image has /%s", sh)
		}
	}

	// The binary runs from the unpacked filesystem and says what it is.
	out, err := run(dir, nil, nil, filepath.Join(rootfs, "tollgate"), "version", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	checkVersionJSON(t, out, version)
	// As the image runs it: chrooted into the image (no shell, no libc),
	// as user 65532, with the image's environment. Needs root.
	if os.Geteuid() == 0 {
		cmd := exec.Command("/tollgate", "version", "--output", "json")
		cmd.Dir = "/"
		cmd.Env = cfg.Config.Env
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("running /tollgate in the image as 65532: %v\n%s", err, stderr.String())
		}
		checkVersionJSON(t, stdout.String(), version)
	} else {
		t.Log("not root: the binary was not run chrooted into the image as user 65532")
	}

	// The tarball (docker load, crane push) names the image.
	var tm []struct {
		RepoTags []string `json:"RepoTags"`
	}
	if err := json.Unmarshal(tarMember(t, tarPath, "manifest.json"), &tm); err != nil || len(tm) != 1 || !slices.Equal(tm[0].RepoTags, []string{ref}) {
		t.Errorf("tarball manifest.json: %+v %v", tm, err)
	}
}

func checkVersionJSON(t *testing.T, out, version string) {
	t.Helper()
	var info struct{ Version, Commit, BuildDate string }
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if info.Version != version || info.Commit != imageCommit || info.BuildDate != imageBuildDate {
		t.Errorf("tollgate version in the image: %+v", info)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// blob reads the blob d describes from an OCI layout and checks its digest
// and size.
func blob(t *testing.T, layoutDir string, d ociDescriptor) []byte {
	t.Helper()
	alg, hexDigest, ok := strings.Cut(d.Digest, ":")
	if !ok || alg != "sha256" {
		t.Fatalf("digest %q", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(layoutDir, "blobs", alg, hexDigest))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != hexDigest || int64(len(data)) != d.Size {
		t.Fatalf("blob %s does not match its descriptor", d.Digest)
	}
	return data
}

// unpackLayer extracts a gzip tar layer into root (regular files and
// directories only, which is all the image has).
func unpackLayer(t *testing.T, data []byte, root string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean("/" + h.Name)
		if name == "/" || strings.Contains(h.Name, "..") {
			t.Fatalf("layer entry %q", h.Name)
		}
		dst := filepath.Join(root, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dst, os.FileMode(h.Mode).Perm()|0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("layer entry %q of type %c: the image holds only files and directories", h.Name, h.Typeflag)
		}
	}
}

func tarMember(t *testing.T, path, member string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s: %v", path, member, err)
		}
		if h.Name == member {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
}

// dockerfileLabels parses the arguments of a LABEL instruction:
// key="value" pairs.
func dockerfileLabels(t *testing.T, args string) map[string]string {
	t.Helper()
	out, err := run(root, nil, nil, "bash", "-c", `eval "set -- $1"; printf '%s\0' "$@"`, "bash", args)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(out, "\x00"), "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("LABEL %q: want key=value pairs", args)
		}
		labels[k] = v
	}
	return labels
}
