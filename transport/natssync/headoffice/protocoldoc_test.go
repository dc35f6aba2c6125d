package headoffice

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The NATS transport's section of proto/PROTOCOL.md names every subject
// the responder serves, and no other.
func TestProtocolDocumentNamesTheSubjectsServed(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../proto/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	const heading = "\n## 11a. The NATS transport\n"
	start := strings.Index(string(doc), heading)
	if start < 0 {
		t.Fatalf("PROTOCOL.md has no section %q", strings.TrimSpace(heading))
	}
	section := string(doc)[start+len(heading):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `magicsync\\.\\{id\\}\\.([a-z]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(documented)
	served := slices.Sorted(maps.Keys(newResponder(nil, Options{}).exchanges()))
	if !slices.Equal(documented, served) {
		t.Fatalf("PROTOCOL.md section 11a names the subjects %v; the responder serves %v", documented, served)
	}
}
