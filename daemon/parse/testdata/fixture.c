/* Test fixture for src/elf.rs: three functions with known names, compiled by the tests into a
 * PIE, a non-PIE executable, a shared library (64 and 32 bit), a stripped copy and a separate
 * debug file. noinline/noclone keep each function a real symbol under its own name (no
 * .constprop/.isra clones); the loops give them a few dozen bytes so that "middle" and "last
 * byte" are distinct addresses. */

__attribute__((noinline, noclone, used)) static int vms_static_fn(int x)
{
	int s = 0;
	for (int i = 0; i < x; i++)
		s += i * x;
	return s;
}

__attribute__((noinline, noclone)) int vms_alpha_fn(int x)
{
	return vms_static_fn(x) + 3;
}

__attribute__((noinline, noclone)) int vms_beta_fn(int x)
{
	int s = 1;
	for (int i = 0; i < x; i++)
		s *= (i | 1);
	return s + vms_alpha_fn(x);
}

/* An assembly label: STT_NOTYPE, size 0, in .text. It must be found, extending to the next
 * symbol. */
__asm__(".text\n"
	".globl vms_asm_label\n"
	"vms_asm_label:\n"
	"\tnop\n\tnop\n\tnop\n\tnop\n\tret\n");

/* A data object: must never be returned by a lookup. */
int vms_data_object = 42;

#ifdef WITH_MAIN
int main(int argc, char **argv)
{
	(void)argv;
	return vms_beta_fn(argc) + vms_data_object;
}
#endif
