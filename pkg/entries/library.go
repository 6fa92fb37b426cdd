package entries

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// LibraryProblem says why the view's library at path (host.conf
// mps_view_library) cannot be mounted into containers, "" when it can (a
// regular file, through links: a bind mount follows them) or path is
// empty. Without it the devices are served all the same, and their
// containers see the whole GPU.
func LibraryProblem(path string) string {
	if path == "" {
		return ""
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s does not exist (package yunion-mps-daemon installs it): containers see the whole GPU", path)
	case err != nil:
		return fmt.Sprintf("%v: containers see the whole GPU", err)
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("%s is not a regular file (%s): containers see the whole GPU", path, fi.Mode().Type())
	}
	return ""
}

// DescribeView is what `mps-daemon check-config` says of the view with
// the library lib: a missing library is not an error (the daemon serves the
// devices without it), but the operator is told.
func DescribeView(lib string) string {
	switch why := LibraryProblem(lib); {
	case lib == "":
		return "off (mps_view_library is empty): containers see the whole GPU's memory"
	case why != "":
		return "MISSING, the devices are served without it: " + why
	}
	return lib + ": containers see their device's cap as the GPU's memory"
}
