package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// hack/packaging's TestImage checks the image itself (with the real binary);
// these check the tool: the push, reproducibility and its errors.

func testOptions(t *testing.T) options {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tollgate")
	if err := os.WriteFile(bin, []byte("not really a binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return options{binary: bin, ca: ca, ref: "example.test/tollgate:1.2.3", version: "1.2.3", revision: "abc",
		created: "2026-12-01T12:00:00Z", platform: "linux/arm64"}
}

// The same inputs make the same image, byte for byte.
func TestReproducible(t *testing.T) {
	o := testOptions(t)
	a, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of the same inputs: %s and %s", da, db)
	}
	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != "arm64" || cf.Config.User != "65532:65532" || cf.Config.Labels["org.opencontainers.image.version"] != "1.2.3" {
		t.Errorf("config %+v", cf.Config)
	}
}

// -push writes the image to the registry -ref names; the OCI layout holds
// the same image.
func TestPush(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	o := testOptions(t)
	o.ref = strings.TrimPrefix(reg.URL, "http://") + "/team/tollgate:1.2.3"
	o.push = true
	o.ociLayout = filepath.Join(t.TempDir(), "layout")
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(o.ref)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(o.ociLayout)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := pushed.Digest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want {
		t.Errorf("the layout holds %v, the registry %s", m.Manifests, want)
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		change func(*options)
		want   string
	}{
		{func(o *options) { o.binary = "" }, "-binary is required"},
		{func(o *options) { o.tarballPath, o.ref = "x.tar", "Not A Ref" }, "-ref"},
		{func(o *options) { o.version = "" }, "-version is required"},
		{func(o *options) {}, "nothing to do"},
		{func(o *options) { o.tarballPath, o.created = "x.tar", "yesterday" }, "-created"},
		{func(o *options) { o.tarballPath, o.platform = "x.tar", "amd64" }, "-platform"},
		{func(o *options) { o.tarballPath, o.ca = "x.tar", o.binary }, "no PEM certificate"},
	} {
		o := testOptions(t)
		c.change(&o)
		if err := run(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", o, err, c.want)
		}
	}
}
