package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every relative link in the README and in docs/ must reach a file of the repository, and its #anchor a
// heading of that file: a newcomer who follows the README follows these links. Sections get renamed and
// removed (points.md linked a performance.md section removed two weeks before; a newcomer's finding,
// 2026-12-06). Links to other sites are left alone: nothing here may depend on them.
func TestRelativeLinksReachAFileAndAHeading(t *testing.T) {
	files, err := filepath.Glob("*.md")
	require.NoError(t, err)
	files = append(files, filepath.Join("..", "README.md"))
	anchors := map[string]map[string]bool{} // cleaned path → anchors of its headings
	links := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range markdownLink.FindAllStringSubmatch(withoutCode(string(text)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, anchor, _ := strings.Cut(target, "#")
			dest := filepath.Clean(filepath.Join(filepath.Dir(file), path))
			if path == "" {
				dest = filepath.Clean(file)
			}
			if _, err := os.Stat(dest); err != nil {
				assert.Failf(t, "link to a file that does not exist", "%s: (%s)", file, target)
				continue
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				heads, err := os.ReadFile(dest)
				require.NoError(t, err)
				anchors[dest] = headingAnchors(string(heads))
			}
			assert.Truef(t, anchors[dest][anchor], "%s: (%s): %s has no heading with that anchor", file, target, dest)
		}
	}
	assert.Greater(t, links, 200, "the links were found") // 308 on 2026-12-06
}

// markdownLink is an inline link or image, [text](target), with the target's optional title left out.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// withoutCode blanks fenced code blocks and inline code spans, whose brackets are not links.
func withoutCode(text string) string {
	return inlineCode.ReplaceAllString(withoutFences(text), "``")
}

// withoutFences blanks the lines of fenced code blocks, whose # lines are not headings.
func withoutFences(text string) string {
	var b strings.Builder
	fenced := false
	for line := range strings.SplitAfterSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			b.WriteString("\n")
			continue
		}
		if fenced {
			b.WriteString("\n")
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

var inlineCode = regexp.MustCompile("`[^`\n]*`")

// headingAnchors returns the anchors GitHub gives the headings of a Markdown text: the heading's text
// lower-cased, every character but letters, digits, spaces, hyphens and underscores dropped, spaces
// made hyphens, and -1, -2, ... after a repeat.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for line := range strings.SplitSeq(withoutFences(text), "\n") {
		rest := strings.TrimLeft(line, "#")
		if level := len(line) - len(rest); level == 0 || level > 6 || !strings.HasPrefix(rest, " ") {
			continue
		}
		title := strings.TrimSpace(rest)
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}
