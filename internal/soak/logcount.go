package soak

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// serviceNames are the services whose logs a run writes, as <name>.log in its log directory.
var serviceNames = []string{"orders", "payments-mock", "points-consumer"}

// errorLine is a text-format ERROR line (the services run with LOG_FORMAT=text): its level is the field
// after the time, so a WARN that quotes "level=ERROR" in its message is not one. alertField is the
// alert attribute of such a line.
var (
	errorLine  = regexp.MustCompile(`^time=\S+ level=ERROR `)
	alertField = regexp.MustCompile(`\balert=([a-z_]+)`)
)

// countLogLines counts each service's ERROR lines and ALERTs in dir. A service without a log (the run
// ended before it started) is left out; a log that cannot be read is an error.
func countLogLines(dir string) (map[string]LogCount, error) {
	out := map[string]LogCount{}
	for _, svc := range serviceNames {
		c, err := countLogFile(filepath.Join(dir, svc+".log"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return out, err
		}
		out[svc] = c
	}
	return out, nil
}

func countLogFile(path string) (LogCount, error) {
	var c LogCount
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024) // the services clip what they quote; a panic's line may be long
	for sc.Scan() {
		line := sc.Text()
		if !errorLine.MatchString(line) {
			continue
		}
		c.Errors++
		if m := alertField.FindStringSubmatch(line); m != nil {
			if c.Alerts == nil {
				c.Alerts = map[string]int{}
			}
			c.Alerts[m[1]]++
		}
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("count the log lines of %s: %w", path, err)
	}
	return c, nil
}
