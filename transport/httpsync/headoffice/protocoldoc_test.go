package headoffice

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The HTTP transport's section of proto/PROTOCOL.md names every endpoint
// the handler serves and every status code it answers, and nothing else:
// the document cannot drift from the code.
func TestTheProtocolDocumentNamesEveryEndpointAndStatusTheHandlerServes(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "proto", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := sectionOf(t, string(doc), "## 11. The HTTP transport")

	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(GET|POST|PUT|DELETE)` \\| `([^`]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1]+" "+m[2])
	}
	var served []string
	for _, rt := range (&handler{}).routes() {
		served = append(served, rt.method+" "+rt.path)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Errorf("PROTOCOL.md section 11 names the endpoints %v; the handler serves %v", documented, served)
	}

	var docStatuses []int
	for _, m := range regexp.MustCompile(`(?m)^\| ([1-5][0-9][0-9]) \|`).FindAllStringSubmatch(section, -1) {
		n, _ := strconv.Atoi(m[1])
		docStatuses = append(docStatuses, n)
	}
	answered := statusesIn(t, "handler.go", "server_adapter.go")
	// The mux answers these itself, for a path or a method it does not serve.
	answered = append(answered, http.StatusNotFound, http.StatusMethodNotAllowed)
	slices.Sort(docStatuses)
	slices.Sort(answered)
	answered = slices.Compact(answered)
	if !slices.Equal(docStatuses, answered) {
		t.Errorf("PROTOCOL.md section 11 lists the statuses %v; the handler answers %v", docStatuses, answered)
	}
}

// sectionOf is the text of the document's section under heading, up to
// the next section of the same level.
func sectionOf(t *testing.T, doc, heading string) string {
	t.Helper()
	start := strings.Index(doc, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("PROTOCOL.md has no section %q", heading)
	}
	rest := doc[start+1+len(heading):]
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

// statusesIn lists the status codes the files name as net/http constants.
func statusesIn(t *testing.T, files ...string) []int {
	t.Helper()
	byName := map[string]int{}
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			byName["Status"+regexp.MustCompile(`[^A-Za-z]`).ReplaceAllString(text, "")] = code
		}
	}
	var out []int
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`http\.(Status[A-Za-z]+)\b`).FindAllStringSubmatch(string(src), -1) {
			code, ok := byName[m[1]]
			if !ok {
				if m[1] == "StatusText" {
					continue
				}
				t.Fatalf("%s names http.%s, which this test cannot read", f, m[1])
			}
			out = append(out, code)
		}
	}
	return out
}
