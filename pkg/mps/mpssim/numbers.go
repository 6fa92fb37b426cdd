package mpssim

import (
	"strconv"
	"strings"

	"yunion.io/x/mps-daemon/pkg/units"
)

// The control reads its numeric arguments the C way (atoi, atof): the
// longest numeric prefix counts and garbage reads as 0. The simulator does
// the same, which is what makes `0.5G` clear a limit and `1T` mean 1 MiB.

// validPercentage reads a percentage the way the control does (C atof) and
// accepts it when it lies in (0, 100].
func validPercentage(s string) (float64, bool) {
	p := cAtof(s)
	return p, p > 0 && p <= 100
}

// setLimit applies a pinned memory limit argument as the control reads it
// (readMemLimit); a result of 0 clears the limit.
func setLimit(m map[int]units.MiB, dev int, arg string) (changed bool) {
	old, had := m[dev]
	if limit := readMemLimit(arg); limit > 0 {
		m[dev] = limit
		return !had || old != limit
	}
	delete(m, dev)
	return had
}

// readMemLimit is how the control reads a limit argument, as measured in
// mps-probe2.txt: the leading integer, times 1024 when followed by G or g,
// otherwise MiB whatever follows (`100K` is 100 MiB, `1T` is 1 MiB); `0.5G`,
// `0` and `abc` read 0, which clears the limit.
func readMemLimit(arg string) units.MiB {
	n, rest := leadingInt(arg)
	if n <= 0 {
		return 0
	}
	if strings.HasPrefix(rest, "G") || strings.HasPrefix(rest, "g") {
		return units.MiB(n * 1024)
	}
	return units.MiB(n)
}

// leadingInt reads an optionally signed decimal prefix, like C's atoi.
func leadingInt(s string) (int, string) {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i {
		return 0, s
	}
	n, err := strconv.Atoi(s[:j])
	if err != nil {
		return 0, s[j:]
	}
	return n, s[j:]
}

func cAtoi(s string) int {
	n, _ := leadingInt(s)
	return n
}

// cAtof reads the longest decimal prefix of s ([+-]digits[.digits][e[+-]digits]),
// like C's atof; no number is 0.
func cAtof(s string) float64 {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	n := digits()
	if i < len(s) && s[i] == '.' {
		i++
		n += digits()
	}
	if n == 0 {
		return 0
	}
	end := i
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() > 0 {
			end = i
		}
	}
	p, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0
	}
	return p
}
