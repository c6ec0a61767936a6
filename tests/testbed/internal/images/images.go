// Package images reads the test bed's process-images.yaml: which images the
// test bed really runs (as local programs) instead of only faking them.
package images

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// File is the mapping file.
type File struct {
	Images []Image `json:"images"`
}

// Image says how to run the containers of matching images.
type Image struct {
	// Match is a path.Match pattern against the container's image reference.
	Match string `json:"match"`
	// Program is the local binary: a path, or a name looked up in the bin
	// dirs, then on the PATH.
	Program string `json:"program"`
	// Entrypoint and Cmd are the image's ENTRYPOINT and CMD, as a container
	// runtime reads them from the image: `command` replaces the entrypoint
	// (and drops cmd), `args` replaces cmd. The program named by the first
	// word (by its base name) is Program.
	Entrypoint []string `json:"entrypoint"`
	Cmd        []string `json:"cmd"`
	// ReadyPort, for a container without a readiness probe, is where it
	// serves (TCP); it is reported ready once that port accepts connections.
	ReadyPort int `json:"readyPort"`
	// Files are what the image holds besides its program, at the paths
	// its containers see them (read-only): each source is a name looked up
	// in the bin dirs, as a program is, or a path.
	Files []ImageFile `json:"files"`
}

// ImageFile is one file or directory of an image.
type ImageFile struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// Load reads and checks the mapping file.
func Load(file string) (*File, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var images File
	if err := yaml.UnmarshalStrict(data, &images); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i, image := range images.Images {
		if image.Match == "" || image.Program == "" {
			return nil, fmt.Errorf("%s: images[%d] needs match and program", file, i)
		}
		for j, f := range image.Files {
			if f.Source == "" || !strings.HasPrefix(f.Target, "/") {
				return nil, fmt.Errorf("%s: images[%d].files[%d] needs a source and an absolute target", file, i, j)
			}
		}
		if _, err := path.Match(image.Match, ""); err != nil {
			return nil, fmt.Errorf("%s: images[%d].match %q: %w", file, i, image.Match, err)
		}
	}
	return &images, nil
}

// For returns how to run image, or nil when it is not mapped.
func (m *File) For(image string) *Image {
	for i := range m.Images {
		if ok, _ := path.Match(m.Images[i].Match, image); ok {
			return &m.Images[i]
		}
	}
	return nil
}

// Mapped reports whether any container of the pod runs a mapped image.
func (m *File) Mapped(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if m.For(c.Image) != nil {
			return true
		}
	}
	return false
}

// Argv is the container's command line as a runtime builds it from the
// image and the container, with the image's program replaced by binary.
func (image *Image) Argv(c *corev1.Container, binary string) ([]string, error) {
	var argv []string
	if len(c.Command) > 0 {
		argv = append(argv, c.Command...)
	} else {
		argv = append(argv, image.Entrypoint...)
	}
	if len(c.Args) > 0 {
		argv = append(argv, c.Args...)
	} else if len(c.Command) == 0 {
		argv = append(argv, image.Cmd...)
	}
	if len(argv) == 0 {
		argv = []string{image.Program}
	}
	if filepath.Base(argv[0]) != filepath.Base(image.Program) {
		return nil, fmt.Errorf("container %s runs %q, but image %s holds only %q", c.Name, argv[0], c.Image, image.Program)
	}
	argv[0] = binary
	return argv, nil
}

// Resolve finds the program in dirs (or takes it as a path).
func (image *Image) Resolve(dirs []string) (string, error) {
	if found := lookUp(dirs, image.Program, false); found != "" {
		return found, nil
	}
	// Then the host's own programs (busybox, say).
	if found, err := exec.LookPath(image.Program); err == nil {
		return found, nil
	}
	return "", fmt.Errorf("program %q of image %q is in none of %v, nor on the PATH", image.Program, image.Match, dirs)
}

// ResolveFiles finds each of the image's files in dirs (or takes it as a
// path): source path and target, in order.
func (image *Image) ResolveFiles(dirs []string) ([]ImageFile, error) {
	resolved := make([]ImageFile, 0, len(image.Files))
	for _, f := range image.Files {
		source := lookUp(dirs, f.Source, true)
		if source == "" {
			return nil, fmt.Errorf("file %q of image %q is in none of %v", f.Source, image.Match, dirs)
		}
		resolved = append(resolved, ImageFile{Source: source, Target: f.Target})
	}
	return resolved, nil
}

// lookUp is name itself when it is a path (holds a slash), else the first
// of dirs holding it (a directory too, if dirOK); "" when none does.
func lookUp(dirs []string, name string, dirOK bool) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, dir := range dirs {
		candidate := filepath.Join(dir, name)
		if info, err := os.Stat(candidate); err == nil && (dirOK || !info.IsDir()) {
			return candidate
		}
	}
	return ""
}
