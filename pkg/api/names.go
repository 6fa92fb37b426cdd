package api

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// forbiddenNameChars are the characters Cloudpods' region refuses in a
// resource's name (db.NewNameValidator at master 2de2952: / \ ; and line
// breaks and tabs; a host's name is not held to ASCII there).
const forbiddenNameChars = "/\\;"

// NameProblem says why s is no name the inventory keeps for a host, or "":
// it holds a character Cloudpods' region refuses in a name (/ \ ;), or a
// control or format character (line breaks and tabs, which the region
// refuses too, and such as a right-to-left override, which changes how a
// name reads in a log or a table), or is not UTF-8. The daemon checks
// mps_host_name against it (pkg/config), the inventory a host it is sent.
func NameProblem(s string) string {
	if i := strings.IndexAny(s, forbiddenNameChars); i >= 0 {
		return fmt.Sprintf("it holds %q, which Cloudpods' region refuses in a name (/ \\ ;)", s[i:i+1])
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return fmt.Sprintf("it holds %U, a control or format character (or no UTF-8)", r)
		}
	}
	return ""
}
