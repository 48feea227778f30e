// ociarchive writes an image as an OCI image layout archive (a tar of oci-layout,
// index.json and blobs/), the format `docker load`, `skopeo copy oci-archive:`, `ctr images
// import` and `kind load image-archive` read. The image is one layer, from a tar of a root
// file system, with its config given by flags; nothing is pulled and no engine is needed.
// A manifest.json as `docker save` writes sits beside them, for engines that read only
// that. The layer's compression and the config's dates are fixed, so the same files give the
// same digest.
//
//	ociarchive -layer rootfs.tar -name ruleop:0.1.0 -out ruleop-0.1.0.oci.tar \
//	  -user 65532:65532 -entrypoint '["/usr/local/bin/ruleop"]' -cmd '["run"]' \
//	  -label org.opencontainers.image.version=0.1.0
package main

import (
	"archive/tar"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type labels map[string]string

func (l labels) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labels) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("a label is KEY=VALUE, not %q", v)
	}
	l[k] = val
	return nil
}

func main() {
	layerPath := flag.String("layer", "", "a tar of the image's root file system")
	name := flag.String("name", "", "the image's name and tag, e.g. ruleop:0.1.0")
	out := flag.String("out", "", "the archive to write")
	user := flag.String("user", "", "the config's User")
	entrypoint := flag.String("entrypoint", "[]", "the config's Entrypoint, as a JSON array")
	cmd := flag.String("cmd", "[]", "the config's Cmd, as a JSON array")
	arch := flag.String("arch", "amd64", "the image's architecture")
	created := flag.Int64("created", 0, "the image's creation time, seconds since the epoch")
	ls := labels{}
	flag.Var(ls, "label", "a label KEY=VALUE (repeatable)")
	flag.Parse()
	if *layerPath == "" || *name == "" || *out == "" {
		fail(fmt.Errorf("-layer, -name and -out are required"))
	}
	if err := write(*layerPath, *name, *out, *user, *entrypoint, *cmd, *arch, *created, ls); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ociarchive:", err)
	os.Exit(1)
}

func write(layerPath, name, out, user, entrypoint, cmd, arch string, created int64, ls labels) error {
	var ep, c []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil {
		return fmt.Errorf("-entrypoint: %w", err)
	}
	if err := json.Unmarshal([]byte(cmd), &c); err != nil {
		return fmt.Errorf("-cmd: %w", err)
	}
	layer, err := tarball.LayerFromFile(layerPath, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return fmt.Errorf("the layer %s: %w", layerPath, err)
	}
	when := v1.Time{Time: time.Unix(created, 0).UTC()}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: when, CreatedBy: "ociarchive " + filepath.Base(layerPath)},
	})
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, when
	cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd = user, ep, c
	cf.Config.Labels = ls
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag := name[strings.LastIndex(name, ":")+1:]
	dir, err := os.MkdirTemp("", "ociarchive")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	full := fullName(name)
	if err := path.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          full,
	})); err != nil {
		return err
	}
	if err := dockerManifest(dir, img, full); err != nil {
		return err
	}
	return tarDir(dir, out)
}

// fullName is name with the registry and path an engine would give it: docker.io/library/
// for a name with no registry ("ruleop:0.1.0").
func fullName(name string) string {
	first, _, more := strings.Cut(name, "/")
	switch {
	case !more:
		return "docker.io/library/" + name
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return name
	default:
		return "docker.io/" + name
	}
}

// dockerManifest writes manifest.json beside the layout, naming the same blobs, as `docker
// save` does since Docker 25: an engine whose image store reads only that (Docker's own,
// before containerd's store) loads the archive too.
func dockerManifest(dir string, img v1.Image, name string) error {
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	paths := []string{}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		paths = append(paths, "blobs/sha256/"+d.Hex)
	}
	m := []map[string]any{{
		"Config":   "blobs/sha256/" + cfg.Hex,
		"RepoTags": []string{strings.TrimPrefix(name, "docker.io/library/")},
		"Layers":   paths,
	}}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
}

// tarDir writes dir's files into a tar at out, in name order, with fixed owners and dates.
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), 0, 0, "", ""
		h.ModTime = time.Unix(0, 0)
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil || d.IsDir() {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		f.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
