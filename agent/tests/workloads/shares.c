/*
 * Test workload for agent/tests/profile.rs. One process, one thread.
 *
 *   shares <seconds> cpu      spends CPU in work_sixty/work_thirty/work_ten
 *                             in the ratio 6:3:1, through distinct paths
 *                             main -> path_a -> work_sixty, and so on
 *   shares <seconds> syscall  calls write(2) on /dev/null in a loop, so
 *                             its samples are mostly in the kernel
 *
 * The shares come from fixed iteration counts of the same loop body, not
 * from wall-clock slices, so they hold however often the process is
 * preempted on a busy machine.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

/* One multiply-add per iteration on a dependency chain; `k` differs per
 * function so that the compiler cannot fold the three into one. */
#define SPIN(n, k)                                                        \
	do {                                                              \
		uint64_t x = sink;                                        \
		for (uint64_t i = 0; i < (n); i++) {                      \
			x = x * 6364136223846793005ULL + (k);             \
			__asm__ volatile("" : "+r"(x));                   \
		}                                                         \
		sink = x;                                                 \
	} while (0)

/* The empty asm after each call keeps it from becoming a tail call, which
 * would take path_* off the stack. */
#ifdef __clang__
#define NOINLINE __attribute__((noinline))
#else
/* noipa also stops GCC's identical-code folding. */
#define NOINLINE __attribute__((noinline, noipa))
#endif

NOINLINE void work_sixty(uint64_t n) { SPIN(6 * n, 1); }
NOINLINE void work_thirty(uint64_t n) { SPIN(3 * n, 3); }
NOINLINE void work_ten(uint64_t n) { SPIN(n, 5); }
NOINLINE void path_a(uint64_t n) { work_sixty(n); __asm__ volatile(""); }
NOINLINE void path_b(uint64_t n) { work_thirty(n); __asm__ volatile(""); }
NOINLINE void path_c(uint64_t n) { work_ten(n); __asm__ volatile(""); }

NOINLINE void write_many(int fd)
{
	char byte = 0;
	for (int i = 0; i < 1000; i++)
		if (write(fd, &byte, 1) != 1)
			exit(3);
	__asm__ volatile("");
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	double end = now() + atof(argv[1]);
	if (strcmp(argv[2], "cpu") == 0) {
		while (now() < end) {
			path_a(200000);
			path_b(200000);
			path_c(200000);
		}
	} else if (strcmp(argv[2], "syscall") == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd < 0)
			return 4;
		while (now() < end)
			write_many(fd);
	} else {
		return 2;
	}
	return 0;
}
