/*
 * Test workload for agent/tests/off_cpu.rs. One process, two threads.
 *
 *   offcpu <seconds>
 *
 * The "waiter" thread waits, in turn, 7 ms in wait_long() (nanosleep) and
 * 3 ms in wait_short() (poll on an empty pipe, so its kernel stack is
 * another one), so about 70% of its time off CPU is under wait_long and
 * 30% under wait_short, reached through waiter -> wait_loop. The main
 * thread burns CPU in burn() meanwhile, for the CPU profile to be checked
 * beside it.
 */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifdef __clang__
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noipa))
#endif

static volatile uint64_t sink;
static int pipe_fds[2];

/* The empty asm after each call keeps it from becoming a tail call. */
NOINLINE void wait_long(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 7 * 1000 * 1000 };

	while (nanosleep(&ts, &ts) != 0)
		;
	__asm__ volatile("");
}

NOINLINE void wait_short(void)
{
	/* Nothing is ever written: poll times out after 3 ms. */
	struct pollfd fd = { .fd = pipe_fds[0], .events = POLLIN };

	if (poll(&fd, 1, 3) != 0)
		exit(3);
	__asm__ volatile("");
}

NOINLINE void wait_loop(void)
{
	for (;;) {
		wait_long();
		wait_short();
	}
}

NOINLINE void *waiter(void *arg)
{
	(void)arg;
	wait_loop();
	__asm__ volatile("");
	return NULL;
}

NOINLINE void burn(uint64_t n)
{
	uint64_t x = sink;

	for (uint64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1;
		__asm__ volatile("" : "+r"(x));
	}
	sink = x;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	double until = now() + atof(argv[1]);
	pthread_t thread;

	if (pipe(pipe_fds) != 0 || pthread_create(&thread, NULL, waiter, NULL) != 0)
		return 3;
	while (now() < until)
		burn(1000000);
	return 0;
}
