// Command image builds tollgate's container image without a Docker daemon:
// `make image` runs it. It assembles, from files on this machine, the same
// image the Dockerfile builds on gcr.io/distroless/static:nonroot:
//
//   - a base layer: /etc/passwd and /etc/group with root and the nonroot
//     user (65532), its home, /tmp, and the CA bundle of the build machine
//     (Debian's ca-certificates, /etc/ssl/certs/ca-certificates.crt);
//   - the static binary as /tollgate;
//   - the config: entrypoint /tollgate, user 65532:65532, the ports and the
//     org.opencontainers.image.* labels.
//
// No base image is pulled, so no network is needed unless -push is given.
// The output is an OCI image layout (-oci-layout) and/or a tarball that
// `docker load` and `crane push` read (-tarball). Layers are reproducible:
// every file carries the -created time.
//
//	go run . -binary ../../dist/linux-amd64/tollgate -ref registry.example/tollgate:0.2.0 \
//	  -version 0.2.0 -revision $(git rev-parse HEAD) -created 2026-12-01T12:00:00Z \
//	  -oci-layout ../../dist/image -tarball ../../dist/tollgate-image.tar [-push]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed parts; hack/packaging's TestImage checks that they agree
// with the Dockerfile.
const (
	uid         = 65532
	binaryPath  = "/tollgate"
	caPath      = "/etc/ssl/certs/ca-certificates.crt"
	title       = "tollgate"
	description = "Distributed rate limiter for API gateways: Kubernetes controller and gateway data plane"
	source      = "https://github.com/tollgate-dev/tollgate"
)

// 8080: gateway proxy or controller metrics; 9090: gateway admin (metrics,
// probes); 8081: controller probes.
var ports = []string{"8080/tcp", "8081/tcp", "9090/tcp"}

type options struct {
	binary, ca, ref, version, revision, created, platform string
	ociLayout, tarballPath                                string
	push                                                  bool
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "The static tollgate binary for the image's platform (required).")
	flag.StringVar(&o.ca, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA certificate bundle to install (Debian's ca-certificates).")
	flag.StringVar(&o.ref, "ref", "", "Image reference (registry/repository:tag) recorded in the outputs and pushed to with -push (required).")
	flag.StringVar(&o.version, "version", "", "Release version: label org.opencontainers.image.version (required).")
	flag.StringVar(&o.revision, "revision", "", "Commit: label org.opencontainers.image.revision.")
	flag.StringVar(&o.created, "created", "", "RFC 3339 time of the image and of every file in it (default: the Unix epoch, for reproducible builds).")
	flag.StringVar(&o.platform, "platform", "linux/amd64", "Platform of the binary, os/arch.")
	flag.StringVar(&o.ociLayout, "oci-layout", "", "Directory to write an OCI image layout to (replaced).")
	flag.StringVar(&o.tarballPath, "tarball", "", "File to write an image tarball to (docker load, crane push).")
	flag.BoolVar(&o.push, "push", false, "Push the image to -ref (credentials from the Docker config, as crane and docker use).")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	switch {
	case o.binary == "":
		return fmt.Errorf("-binary is required")
	case o.ref == "":
		return fmt.Errorf("-ref is required")
	case o.version == "":
		return fmt.Errorf("-version is required")
	case o.ociLayout == "" && o.tarballPath == "" && !o.push:
		return fmt.Errorf("nothing to do: give -oci-layout, -tarball or -push")
	}
	ref, err := name.ParseReference(o.ref)
	if err != nil {
		return fmt.Errorf("-ref %q: %w", o.ref, err)
	}
	img, err := build(o)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if o.ociLayout != "" {
		if err := os.RemoveAll(o.ociLayout); err != nil {
			return err
		}
		p, err := layout.Write(o.ociLayout, empty.Index)
		if err != nil {
			return fmt.Errorf("-oci-layout: %w", err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": ref.Name(),
		})); err != nil {
			return fmt.Errorf("-oci-layout: %w", err)
		}
		fmt.Printf("wrote OCI layout %s (%s)\n", o.ociLayout, digest)
	}
	if o.tarballPath != "" {
		if err := tarball.WriteToFile(o.tarballPath, ref, img); err != nil {
			return fmt.Errorf("-tarball: %w", err)
		}
		fmt.Printf("wrote %s (%s)\n", o.tarballPath, ref.Name())
	}
	if o.push {
		if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", ref.Name(), err)
		}
		fmt.Printf("pushed %s@%s\n", ref.Context().Name(), digest)
	}
	return nil
}

// build assembles the image.
func build(o options) (v1.Image, error) {
	created := time.Unix(0, 0).UTC()
	if o.created != "" {
		t, err := time.Parse(time.RFC3339, o.created)
		if err != nil {
			return nil, fmt.Errorf("-created %q: want RFC 3339: %w", o.created, err)
		}
		created = t.UTC()
	}
	goos, arch, ok := strings.Cut(o.platform, "/")
	if !ok || goos == "" || arch == "" {
		return nil, fmt.Errorf("-platform %q: want os/arch", o.platform)
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, fmt.Errorf("-binary: %w", err)
	}
	ca, err := os.ReadFile(o.ca)
	if err != nil {
		return nil, fmt.Errorf("-ca-bundle: %w (install Debian's ca-certificates)", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("-ca-bundle %s holds no PEM certificate", o.ca)
	}
	base, err := layer(created, baseFiles(ca))
	if err != nil {
		return nil, err
	}
	app, err := layer(created, []file{{path: binaryPath, mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, app)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = goos, arch
	cf.Created = v1.Time{Time: created}
	cf.Config = imageConfig(o, created)
	cf.History = []v1.History{
		{Created: v1.Time{Time: created}, CreatedBy: "hack/image: /etc/passwd, /etc/group (nonroot 65532), CA certificates", Comment: "base"},
		{Created: v1.Time{Time: created}, CreatedBy: "hack/image: COPY tollgate /tollgate"},
	}
	return mutate.ConfigFile(img, cf)
}

// baseFiles are the base layer's files: what distroless/static:nonroot
// provides that the binary needs.
func baseFiles(ca []byte) []file {
	home := "/home/nonroot"
	return []file{
		{path: "/etc/", mode: 0o755 | os.ModeDir},
		{path: "/etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:%s:/sbin/nologin\n", uid, uid, home))},
		{path: "/etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid))},
		{path: "/etc/ssl/", mode: 0o755 | os.ModeDir},
		{path: "/etc/ssl/certs/", mode: 0o755 | os.ModeDir},
		{path: caPath, mode: 0o644, data: ca},
		{path: "/home/", mode: 0o755 | os.ModeDir},
		{path: home + "/", mode: 0o700 | os.ModeDir, owner: uid},
		{path: "/root/", mode: 0o700 | os.ModeDir},
		{path: "/tmp/", mode: 0o777 | os.ModeDir | os.ModeSticky},
	}
}

// imageConfig is the image's run configuration, as the Dockerfile sets it.
func imageConfig(o options, created time.Time) v1.Config {
	exposed := map[string]struct{}{}
	for _, p := range ports {
		exposed[p] = struct{}{}
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}
	return v1.Config{
		Entrypoint: []string{binaryPath},
		User:       strconv.Itoa(uid) + ":" + strconv.Itoa(uid),
		WorkingDir: "/",
		// As distroless/static sets them.
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + caPath},
		ExposedPorts: exposed,
		Labels:       labels,
	}
}

// file is one entry of a layer; directory paths end in "/".
type file struct {
	path  string
	mode  os.FileMode
	data  []byte
	owner int
}

// layer makes a gzip-compressed OCI layer of files, every entry at time t.
func layer(t time.Time, files []file) (v1.Layer, error) {
	sort.SliceStable(files, func(i, j int) bool { return files[i].path < files[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(f.path, "/"),
			Mode:    int64(f.mode.Perm()),
			ModTime: t,
			Uid:     f.owner,
			Gid:     f.owner,
			Format:  tar.FormatPAX,
		}
		if f.mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.mode.IsDir() {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
