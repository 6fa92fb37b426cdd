package mpsctl

import (
	"encoding/json"
	"fmt"
	"io"
)

// writeJSON prints v indented, for -o json. HTML escaping is off so that
// values read as the API wrote them.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}
