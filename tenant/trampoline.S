/*
 * dlsym and dlvsym (hook.c says why they are assembly): save the
 * arguments, ask view_dlsym_route / view_dlvsym_route where to go, restore
 * the arguments and the stack exactly as the caller left them, and jump.
 * glibc's dlsym then sees the caller's own return address and resolves
 * RTLD_NEXT and RTLD_DEFAULT relative to the caller, as without us. A
 * route of NULL (glibc's dlsym not found) returns NULL.
 *
 * Each is also defined under glibc's own versions of the name (BASE: the
 * architecture's first glibc version; and GLIBC_2.34), as entries that
 * jump to the unversioned one: a lookup that names a version, as
 * dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5") in another preloaded library's
 * dlsym wrapper does, accepts only a definition of that version. The
 * unversioned one answers every other reference, of any version.
 *
 * Marked for Intel CET (IBT, shadow stack) and Arm BTI when the C is
 * compiled for them, so that loading us never turns them off in a process.
 */
#if defined(__x86_64__)

#ifdef __CET__
#define LANDING endbr64
#else
#define LANDING
#endif

	.text
	.p2align 4
	.globl dlsym
	.type dlsym, @function
dlsym:
.Ldlsym_body:
	.cfi_startproc
	LANDING
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	subq $8, %rsp /* the call below on a 16-byte aligned stack */
	.cfi_adjust_cfa_offset 8
	call view_dlsym_route
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	testq %rax, %rax
	jz 1f
	jmp *%rax
1:	ret
	.cfi_endproc
	.size dlsym, .-dlsym

	.p2align 4
	.globl dlvsym
	.type dlvsym, @function
dlvsym:
.Ldlvsym_body:
	.cfi_startproc
	LANDING
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	pushq %rdx /* three pushes: aligned */
	.cfi_adjust_cfa_offset 8
	call view_dlvsym_route
	popq %rdx
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	testq %rax, %rax
	jz 1f
	jmp *%rax
1:	ret
	.cfi_endproc
	.size dlvsym, .-dlvsym

/* VERSIONED name base: name@GLIBC_2.2.5 and name@GLIBC_2.34, jumping to name. */
.macro VERSIONED name
	.p2align 4
	.globl view_\name\()_base
	.type view_\name\()_base, @function
view_\name\()_base:
	LANDING
	jmp .L\name\()_body
	.size view_\name\()_base, .-view_\name\()_base
	.symver view_\name\()_base, \name@GLIBC_2.2.5
	.p2align 4
	.globl view_\name\()_234
	.type view_\name\()_234, @function
view_\name\()_234:
	LANDING
	jmp .L\name\()_body
	.size view_\name\()_234, .-view_\name\()_234
	.symver view_\name\()_234, \name@GLIBC_2.34
.endm
	VERSIONED dlsym
	VERSIONED dlvsym

#ifdef __CET__
	.section .note.gnu.property, "a"
	.p2align 3
	.long 4, 16, 5 /* name size, descriptor size, NT_GNU_PROPERTY_TYPE_0 */
	.asciz "GNU"
	.long 0xc0000002, 4, 3 /* X86_FEATURE_1_AND: IBT | SHSTK */
	.p2align 3
#endif

#elif defined(__aarch64__)

	.text
	.p2align 2
	.globl dlsym
	.type dlsym, %function
dlsym:
.Ldlsym_body:
	.cfi_startproc
	hint 34 /* bti c */
	stp x29, x30, [sp, #-32]!
	.cfi_def_cfa_offset 32
	.cfi_offset 29, -32
	.cfi_offset 30, -24
	mov x29, sp
	stp x0, x1, [sp, #16]
	bl view_dlsym_route
	mov x16, x0
	ldp x0, x1, [sp, #16]
	ldp x29, x30, [sp], #32
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	cbz x16, 1f
	br x16 /* x16: a BTI "c" landing pad accepts it */
1:	mov x0, xzr
	ret
	.cfi_endproc
	.size dlsym, .-dlsym

	.p2align 2
	.globl dlvsym
	.type dlvsym, %function
dlvsym:
.Ldlvsym_body:
	.cfi_startproc
	hint 34 /* bti c */
	stp x29, x30, [sp, #-48]!
	.cfi_def_cfa_offset 48
	.cfi_offset 29, -48
	.cfi_offset 30, -40
	mov x29, sp
	stp x0, x1, [sp, #16]
	str x2, [sp, #32]
	bl view_dlvsym_route
	mov x16, x0
	ldp x0, x1, [sp, #16]
	ldr x2, [sp, #32]
	ldp x29, x30, [sp], #48
	.cfi_restore 30
	.cfi_restore 29
	.cfi_def_cfa_offset 0
	cbz x16, 1f
	br x16
1:	mov x0, xzr
	ret
	.cfi_endproc
	.size dlvsym, .-dlvsym

/* VERSIONED name: name@GLIBC_2.17 and name@GLIBC_2.34, jumping to name. */
.macro VERSIONED name
	.p2align 2
	.globl view_\name\()_base
	.type view_\name\()_base, %function
view_\name\()_base:
	hint 34 /* bti c */
	b .L\name\()_body
	.size view_\name\()_base, .-view_\name\()_base
	.symver view_\name\()_base, \name@GLIBC_2.17
	.p2align 2
	.globl view_\name\()_234
	.type view_\name\()_234, %function
view_\name\()_234:
	hint 34 /* bti c */
	b .L\name\()_body
	.size view_\name\()_234, .-view_\name\()_234
	.symver view_\name\()_234, \name@GLIBC_2.34
.endm
	VERSIONED dlsym
	VERSIONED dlvsym

#ifdef __ARM_FEATURE_BTI_DEFAULT
	.section .note.gnu.property, "a"
	.p2align 3
	.long 4, 16, 5 /* name size, descriptor size, NT_GNU_PROPERTY_TYPE_0 */
	.asciz "GNU"
	.long 0xc0000000, 4, 3 /* AARCH64_FEATURE_1_AND: BTI | PAC */
	.long 0
#endif

#else
#error "trampoline.S: only x86-64 and aarch64"
#endif

	.section .note.GNU-stack, "", %progbits
