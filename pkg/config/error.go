package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Error is one problem in a configuration file, located so an operator can go
// straight to it: "host.conf:12: cuda_mps_replicas: must be at least 1".
// Several are joined with errors.Join, one per line.
type Error struct {
	File  string
	Line  int // 1-based; 0 when the problem has no line (the file as a whole)
	Field string
	Msg   string
}

// Error prints FILE:LINE: FIELD: MSG, leaving out the line when it is 0 and the
// field when it is empty.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// yamlLine matches the position yaml.v3 puts in its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns a yaml.v3 syntax error into an Error, keeping the line
// yaml.v3 found (it reports one for most, not all, syntax errors).
func syntaxError(file string, err error) *Error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// errorf builds an Error at a line.
func errorf(file string, line int, field, format string, args ...any) *Error {
	return &Error{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}
