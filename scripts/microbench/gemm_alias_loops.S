# The two matmul loop nests of BERT-base's GELU dense layer (128 x 768 by 768 x 3072, float32) as
# LLVM compiles them for Zen 4 in two schedules (apache-tvm 0.27, target llvm -mcpu=znver4), for
# gemm_alias.c. Each inner loop is copied from the kernel's assembly as it is; the loops around it
# are written out again with the same registers. Both run 18,874,368 512-bit FMAs over the whole
# layer (12 or 96 tiles).
#
# void wide_tile(float *acc, const float *act, const float *w)
#   MetaSchedule's pick: a 128 x 256 accumulator tile (128 KiB, rows 1 KiB apart); per step of
#   k (192 steps of 4), 16 activations broadcast into registers (4 rows x 4 k), then the inner
#   loop over the tile's 256 columns loads 4 weight rows and 4 accumulator rows and stores the
#   accumulators back. `w` points at the tile's first column.
# void narrow_tile(float *acc, const float *act, const float *w)
#   tuna's pick: a 64 x 64 accumulator tile (16 KiB, rows 256 bytes apart); per step of k, 4
#   weight rows of 64 columns held in registers, then the inner loop over the tile's 64 rows
#   broadcasts 4 activations a row from memory and loads and stores the row's accumulators.
#   `act` points at the tile's first row, `w` at its first column.
	.text
	.globl	wide_tile
	.type	wide_tile, @function
wide_tile:
	push	%r12
	push	%rbx
	lea	3136(%rdi), %rax
	mov	%rsi, %r10
	lea	36928(%rdx), %rcx
	xorl	%edx, %edx
.Lm_k:
	movq	%rdx, %rsi
	shlq	$4, %rsi
	movq	%rax, %rdi
	xorl	%r8d, %r8d
	addq	%r10, %rsi
.Lm_rows:
	leaq	(%r8,%r8,2), %r9
	shlq	$12, %r9
	vbroadcastss	(%rsi,%r9), %zmm0
	vbroadcastss	3072(%rsi,%r9), %zmm1
	vbroadcastss	6144(%rsi,%r9), %zmm2
	vbroadcastss	9216(%rsi,%r9), %zmm3
	vbroadcastss	4(%rsi,%r9), %zmm4
	vbroadcastss	3076(%rsi,%r9), %zmm5
	vbroadcastss	6148(%rsi,%r9), %zmm6
	vbroadcastss	9220(%rsi,%r9), %zmm7
	vbroadcastss	8(%rsi,%r9), %zmm8
	vbroadcastss	3080(%rsi,%r9), %zmm9
	vbroadcastss	6152(%rsi,%r9), %zmm10
	vbroadcastss	9224(%rsi,%r9), %zmm11
	vbroadcastss	12(%rsi,%r9), %zmm12
	vbroadcastss	3084(%rsi,%r9), %zmm13
	vbroadcastss	6156(%rsi,%r9), %zmm14
	vbroadcastss	9228(%rsi,%r9), %zmm15
	xorl	%r9d, %r9d
.Lm_col:
	vmovups	-36928(%rcx,%r9,4), %zmm16
	vmovups	-3136(%rdi,%r9,4), %zmm17
	vmovups	-2112(%rdi,%r9,4), %zmm18
	vmovups	-1088(%rdi,%r9,4), %zmm19
	vmovups	-24640(%rcx,%r9,4), %zmm20
	vmovups	-12352(%rcx,%r9,4), %zmm22
	vmovups	-64(%rcx,%r9,4), %zmm21
	vfmadd231ps	%zmm16, %zmm0, %zmm17
	vfmadd231ps	%zmm16, %zmm1, %zmm18
	vfmadd231ps	%zmm16, %zmm2, %zmm19
	vfmadd213ps	-64(%rdi,%r9,4), %zmm3, %zmm16
	vfmadd231ps	%zmm20, %zmm4, %zmm17
	vfmadd231ps	%zmm20, %zmm5, %zmm18
	vfmadd231ps	%zmm20, %zmm6, %zmm19
	vfmadd231ps	%zmm22, %zmm8, %zmm17
	vfmadd231ps	%zmm22, %zmm9, %zmm18
	vfmadd231ps	%zmm22, %zmm10, %zmm19
	vfmadd231ps	%zmm20, %zmm7, %zmm16
	vfmadd231ps	%zmm21, %zmm12, %zmm17
	vfmadd231ps	%zmm21, %zmm13, %zmm18
	vfmadd231ps	%zmm21, %zmm14, %zmm19
	vfmadd231ps	%zmm22, %zmm11, %zmm16
	vmovups	%zmm17, -3136(%rdi,%r9,4)
	vmovups	%zmm18, -2112(%rdi,%r9,4)
	vmovups	%zmm19, -1088(%rdi,%r9,4)
	vfmadd231ps	%zmm21, %zmm15, %zmm16
	vmovups	%zmm16, -64(%rdi,%r9,4)
	vmovups	-36864(%rcx,%r9,4), %zmm16
	vmovups	-3072(%rdi,%r9,4), %zmm17
	vmovups	-2048(%rdi,%r9,4), %zmm18
	vmovups	-1024(%rdi,%r9,4), %zmm19
	vmovups	-24576(%rcx,%r9,4), %zmm20
	vmovups	-12288(%rcx,%r9,4), %zmm22
	vmovups	(%rcx,%r9,4), %zmm21
	vfmadd231ps	%zmm16, %zmm0, %zmm17
	vfmadd231ps	%zmm16, %zmm1, %zmm18
	vfmadd231ps	%zmm16, %zmm2, %zmm19
	vfmadd213ps	(%rdi,%r9,4), %zmm3, %zmm16
	vfmadd231ps	%zmm20, %zmm4, %zmm17
	vfmadd231ps	%zmm20, %zmm5, %zmm18
	vfmadd231ps	%zmm20, %zmm6, %zmm19
	vfmadd231ps	%zmm22, %zmm8, %zmm17
	vfmadd231ps	%zmm22, %zmm9, %zmm18
	vfmadd231ps	%zmm22, %zmm10, %zmm19
	vfmadd231ps	%zmm20, %zmm7, %zmm16
	vfmadd231ps	%zmm21, %zmm12, %zmm17
	vfmadd231ps	%zmm21, %zmm13, %zmm18
	vfmadd231ps	%zmm21, %zmm14, %zmm19
	vfmadd231ps	%zmm22, %zmm11, %zmm16
	vmovups	%zmm17, -3072(%rdi,%r9,4)
	vmovups	%zmm18, -2048(%rdi,%r9,4)
	vmovups	%zmm19, -1024(%rdi,%r9,4)
	vfmadd231ps	%zmm21, %zmm15, %zmm16
	vmovups	%zmm16, (%rdi,%r9,4)
	addq	$32, %r9
	cmpq	$256, %r9
	jne	.Lm_col

	incq	%r8
	addq	$4096, %rdi
	cmpq	$32, %r8
	jne	.Lm_rows
	incq	%rdx
	addq	$49152, %rcx
	cmpq	$192, %rdx
	jne	.Lm_k
	pop	%rbx
	pop	%r12
	vzeroupper
	ret
	.size	wide_tile, .-wide_tile

	.globl	narrow_tile
	.type	narrow_tile, @function
narrow_tile:
	push	%r12
	push	%r14
	push	%rbx
	mov	%rdi, %r14
	mov	%rsi, %r12
	mov	%rdx, %rbx
	xorl	%esi, %esi
	xorl	%ecx, %ecx
.Lt_k:
	leaq	(%rsi,%rsi,2), %rdi
	movl	%ecx, %r8d
	shlq	$14, %rdi
	vmovaps	(%rbx,%rdi), %zmm0
	vmovaps	64(%rbx,%rdi), %zmm1
	vmovaps	128(%rbx,%rdi), %zmm2
	vmovaps	192(%rbx,%rdi), %zmm3
	vmovaps	12352(%rbx,%rdi), %zmm4
	vmovaps	12288(%rbx,%rdi), %zmm5
	vmovaps	24640(%rbx,%rdi), %zmm6
	vmovaps	24576(%rbx,%rdi), %zmm7
	vmovaps	36928(%rbx,%rdi), %zmm8
	vmovaps	36864(%rbx,%rdi), %zmm9
	vmovaps	12480(%rbx,%rdi), %zmm10
	vmovaps	12416(%rbx,%rdi), %zmm11
	vmovaps	24768(%rbx,%rdi), %zmm12
	vmovaps	24704(%rbx,%rdi), %zmm13
	vmovaps	37056(%rbx,%rdi), %zmm14
	vmovaps	36992(%rbx,%rdi), %zmm15
	movl	$384, %edi
.Lt_row:
	movslq	%r8d, %r8
	vmovups	-384(%r14,%rdi), %zmm17
	vmovups	-320(%r14,%rdi), %zmm18
	vbroadcastss	(%r12,%r8,4), %zmm16
	vbroadcastss	4(%r12,%r8,4), %zmm19
	vbroadcastss	8(%r12,%r8,4), %zmm20
	vbroadcastss	12(%r12,%r8,4), %zmm21
	leal	768(%r8), %r9d
	addl	$1536, %r8d
	movslq	%r9d, %r9
	vfmadd231ps	%zmm0, %zmm16, %zmm17
	vfmadd231ps	%zmm1, %zmm16, %zmm18
	vfmadd231ps	%zmm4, %zmm19, %zmm18
	vfmadd231ps	%zmm5, %zmm19, %zmm17
	vfmadd231ps	%zmm7, %zmm20, %zmm17
	vfmadd231ps	%zmm6, %zmm20, %zmm18
	vfmadd231ps	%zmm8, %zmm21, %zmm18
	vfmadd231ps	%zmm9, %zmm21, %zmm17
	vmovups	%zmm17, -384(%r14,%rdi)
	vmovups	%zmm18, -320(%r14,%rdi)
	vmovups	-256(%r14,%rdi), %zmm17
	vfmadd231ps	%zmm2, %zmm16, %zmm17
	vfmadd213ps	-192(%r14,%rdi), %zmm3, %zmm16
	vfmadd231ps	%zmm19, %zmm11, %zmm17
	vfmadd231ps	%zmm13, %zmm20, %zmm17
	vfmadd231ps	%zmm10, %zmm19, %zmm16
	vfmadd231ps	%zmm21, %zmm15, %zmm17
	vfmadd231ps	%zmm20, %zmm12, %zmm16
	vmovups	%zmm17, -256(%r14,%rdi)
	vfmadd231ps	%zmm14, %zmm21, %zmm16
	vmovups	%zmm16, -192(%r14,%rdi)
	vbroadcastss	(%r12,%r9,4), %zmm16
	vmovups	-128(%r14,%rdi), %zmm17
	vmovups	-64(%r14,%rdi), %zmm19
	vbroadcastss	4(%r12,%r9,4), %zmm18
	vbroadcastss	8(%r12,%r9,4), %zmm20
	vbroadcastss	12(%r12,%r9,4), %zmm21
	vfmadd231ps	%zmm0, %zmm16, %zmm17
	vfmadd231ps	%zmm1, %zmm16, %zmm19
	vfmadd231ps	%zmm4, %zmm18, %zmm19
	vfmadd231ps	%zmm5, %zmm18, %zmm17
	vfmadd231ps	%zmm7, %zmm20, %zmm17
	vfmadd231ps	%zmm6, %zmm20, %zmm19
	vfmadd231ps	%zmm8, %zmm21, %zmm19
	vfmadd231ps	%zmm9, %zmm21, %zmm17
	vmovups	%zmm17, -128(%r14,%rdi)
	vmovups	%zmm19, -64(%r14,%rdi)
	vmovups	(%r14,%rdi), %zmm17
	vfmadd231ps	%zmm2, %zmm16, %zmm17
	vfmadd213ps	64(%r14,%rdi), %zmm3, %zmm16
	vfmadd231ps	%zmm18, %zmm11, %zmm17
	vfmadd231ps	%zmm13, %zmm20, %zmm17
	vfmadd231ps	%zmm10, %zmm18, %zmm16
	vfmadd231ps	%zmm21, %zmm15, %zmm17
	vfmadd231ps	%zmm20, %zmm12, %zmm16
	vmovups	%zmm17, (%r14,%rdi)
	vfmadd231ps	%zmm14, %zmm21, %zmm16
	vmovups	%zmm16, 64(%r14,%rdi)
	addq	$512, %rdi
	cmpq	$16768, %rdi
	jne	.Lt_row

	incq	%rsi
	addl	$4, %ecx
	cmpq	$192, %rsi
	jne	.Lt_k
	pop	%rbx
	pop	%r14
	pop	%r12
	vzeroupper
	ret
	.size	narrow_tile, .-narrow_tile
	.section	.note.GNU-stack,"",@progbits
