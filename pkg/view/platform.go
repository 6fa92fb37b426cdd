package view

import (
	"encoding/binary"
	"fmt"
)

// The preload list names the library through glibc's $PLATFORM, which
// the dynamic loader expands in /etc/ld.so.preload to the platform of
// the process being started (the kernel's AT_PLATFORM, or glibc's own
// name for the CPU): /run/yunion-mps/lib/p/$PLATFORM/libyunion-mps-view.so.
// For the host's own platforms, the entry of the platform directory (the
// Store's "platforms", mounted at ContainerPlatforms) is a link to "..",
// so the name is the library mounted at ContainerLibrary; for every other
// platform a program of a container may be (a 32-bit one, or one of
// another architecture run by qemu-user), the name is a stub: an ELF
// shared object of that platform's class and machine with nothing in it,
// which the loader maps and forgets. Without it, every start of such a
// program printed "ERROR: ld.so: object ... cannot be preloaded (wrong
// ELF class: ELFCLASS64): ignored." (docs/containers.md). A platform
// named by neither (another architecture still) gets that line, as before.

// machine is an ELF class and machine a stub is made for.
type machine struct {
	name    string // for errors and tests
	class64 bool
	em      uint16
	flags   uint32
}

var (
	machineX8664 = machine{"x86-64", true, 62, 0}
	machineI386  = machine{"i386", false, 3, 0}
	machineArm64 = machine{"aarch64", true, 183, 0}
	// EABI version 5, no float ABI flag: the hard-float and soft-float
	// loaders both take it.
	machineArm = machine{"arm", false, 40, 0x05000000}
)

// platformMachines are the $PLATFORM values of the x86 and Arm
// families: what the kernel gives (x86_64, i686, aarch64, v7l, v8l...)
// and the names glibc uses instead on some CPUs (haswell, xeon_phi from
// glibc 2.26 on an x86-64 with AVX2 or AVX-512; i386 to i686 on 32-bit
// x86).
var platformMachines = map[string]machine{
	"x86_64": machineX8664, "haswell": machineX8664, "xeon_phi": machineX8664,
	"i386": machineI386, "i486": machineI386, "i586": machineI386, "i686": machineI386,
	"aarch64": machineArm64,
	"v5l":     machineArm, "v6l": machineArm, "v7l": machineArm, "v8l": machineArm,
}

// nativeMachine is the machine of the library built for GOARCH goarch.
func nativeMachine(goarch string) (machine, error) {
	switch goarch {
	case "amd64":
		return machineX8664, nil
	case "arm64":
		return machineArm64, nil
	}
	return machine{}, fmt.Errorf("view: no library for %s (amd64 and arm64 only)", goarch)
}

// stub is an ELF shared object of m with nothing in it: one writable,
// non-executable segment (the loader rewrites the dynamic section's
// addresses in place; nothing executable, so it loads from a noexec
// mount too) holding the headers, an empty string table, the null symbol,
// a hash table of one empty bucket and the dynamic section; and a
// PT_GNU_STACK saying the stack is not executable (without it glibc would
// make the process's stack executable).
func stub(m machine) []byte {
	le := binary.LittleEndian
	// Sizes of the ELF header, a program header, a symbol, a word.
	ehsz, phsz, symsz, word := 52, 32, 16, 4
	if m.class64 {
		ehsz, phsz, symsz, word = 64, 56, 24, 8
	}
	const nph = 3
	strtab := ehsz + nph*phsz
	symtab := (strtab + 1 + 7) &^ 7
	hash := symtab + symsz
	dynamic := (hash + 16 + 7) &^ 7
	dyn := [][2]uint64{{5, uint64(strtab)}, {10, 1}, {6, uint64(symtab)}, {11, uint64(symsz)}, {4, uint64(hash)}, {0, 0}}
	size := dynamic + len(dyn)*2*word
	b := make([]byte, size)
	put := func(off int, v uint64) { // a word of the class
		if m.class64 {
			le.PutUint64(b[off:], v)
		} else {
			le.PutUint32(b[off:], uint32(v))
		}
	}

	copy(b, "\x7fELF")
	b[4] = 1 // ELFCLASS32
	if m.class64 {
		b[4] = 2
	}
	b[5], b[6] = 1, 1            // little-endian, EV_CURRENT
	le.PutUint16(b[16:], 3)      // e_type: ET_DYN
	le.PutUint16(b[18:], m.em)   // e_machine
	le.PutUint32(b[20:], 1)      // e_version
	put(24+word, uint64(ehsz))   // e_phoff (after e_entry)
	f := 24 + 3*word             // e_flags, after e_shoff
	le.PutUint32(b[f:], m.flags) //
	le.PutUint16(b[f+4:], uint16(ehsz))
	le.PutUint16(b[f+6:], uint16(phsz))
	le.PutUint16(b[f+8:], nph)
	// e_shentsize, e_shnum, e_shstrndx: 0, no sections.

	ph := func(i int, typ, flags uint32, off, filesz, align uint64) {
		p := ehsz + i*phsz
		le.PutUint32(b[p:], typ)
		if m.class64 { // type, flags, offset, vaddr, paddr, filesz, memsz, align
			le.PutUint32(b[p+4:], flags)
			for j, v := range []uint64{off, off, off, filesz, filesz, align} {
				le.PutUint64(b[p+8+8*j:], v)
			}
		} else { // type, offset, vaddr, paddr, filesz, memsz, flags, align
			for j, v := range []uint64{off, off, off, filesz, filesz} {
				le.PutUint32(b[p+4+4*j:], uint32(v))
			}
			le.PutUint32(b[p+24:], flags)
			le.PutUint32(b[p+28:], uint32(align))
		}
	}
	const ptLoad, ptDynamic, ptGNUStack = 1, 2, 0x6474e551
	const pfW, pfR = 2, 4
	ph(0, ptLoad, pfR|pfW, 0, uint64(size), 0x10000) // 64 KiB: a multiple of any page size
	ph(1, ptDynamic, pfR|pfW, uint64(dynamic), uint64(len(dyn)*2*word), uint64(word))
	ph(2, ptGNUStack, pfR|pfW, 0, 0, 16)

	// strtab: one NUL byte (already); symtab: the null symbol (zeros).
	le.PutUint32(b[hash:], 1)   // nbucket
	le.PutUint32(b[hash+4:], 1) // nchain; bucket[0] = chain[0] = 0
	for i, d := range dyn {
		put(dynamic+2*i*word, d[0])
		put(dynamic+(2*i+1)*word, d[1])
	}
	return b
}
