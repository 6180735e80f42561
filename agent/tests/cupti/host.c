/*
 * A CUDA program as libkiln_cuda.so sees it, without CUDA: it loads the
 * injection library as the driver does for CUDA_INJECTION64_PATH, calls
 * InitializeInjection (which finds the fake libcupti through
 * KILN_CUPTI_PATH), then drives the fake as the driver would: a context,
 * then kernel launches from two named threads, each through call paths
 * of its own.
 *
 *   host LIBKILN_CUDA LIBCUPTI GEMM_LAUNCHES COPY_LAUNCHES FINAL_LAUNCHES
 *
 * Phase 1: "trainer" launches gemm_kernel (GEMM_NS each) and "loader"
 * launches copy_kernel (COPY_NS each); main flushes CUPTI's buffers, prints
 * "launched N", and keeps both threads alive (so the agent can read their
 * names) until its stdin closes. Phase 2: main launches final_kernel
 * (FINAL_NS each) and returns without flushing: the library's atexit
 * handler flushes and sends them in its last snapshot.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* GPU time of one execution of each kernel, ns: the test checks totals. */
#define GEMM_NS 1500
#define COPY_NS 700
#define FINAL_NS 300

/* Kernel names live as long as the program, as CUPTI's do. */
static const char GEMM[] = "gemm_kernel";
static const char COPY[] = "copy_kernel";
static const char FINAL[] = "final_kernel";

typedef uint32_t (*launch_fn)(const char *name, uint64_t duration_ns);

static launch_fn launch;
static int gemm_launches, copy_launches;
static pthread_barrier_t launched, release;

__attribute__((noinline)) static void forward_pass(int n)
{
	for (int i = 0; i < n; i++)
		launch(GEMM, GEMM_NS);
}

__attribute__((noinline)) static void train_step(int n)
{
	forward_pass(n);
}

__attribute__((noinline)) static void prefetch_batch(int n)
{
	for (int i = 0; i < n; i++)
		launch(COPY, COPY_NS);
}

static void *trainer(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "trainer");
	train_step(gemm_launches);
	pthread_barrier_wait(&launched);
	pthread_barrier_wait(&release);
	return NULL;
}

static void *loader(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "loader");
	prefetch_batch(copy_launches);
	pthread_barrier_wait(&launched);
	pthread_barrier_wait(&release);
	return NULL;
}

static void *symbol(void *lib, const char *name)
{
	void *f = dlsym(lib, name);
	if (!f) {
		fprintf(stderr, "host: no %s: %s\n", name, dlerror());
		exit(3);
	}
	return f;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: host LIBKILN_CUDA LIBCUPTI GEMM COPY FINAL\n");
		return 2;
	}
	gemm_launches = atoi(argv[3]);
	copy_launches = atoi(argv[4]);
	int final_launches = atoi(argv[5]);

	void *kiln = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!kiln) {
		fprintf(stderr, "host: dlopen: %s\n", dlerror());
		return 2;
	}
	int (*init)(void) = (int (*)(void))symbol(kiln, "InitializeInjection");
	if (init() != 1) {
		fprintf(stderr, "host: InitializeInjection failed\n");
		return 4;
	}
	/* The library opened the fake; take the same copy. */
	void *cupti = dlopen(argv[2], RTLD_NOW | RTLD_NOLOAD);
	if (!cupti) {
		fprintf(stderr, "host: the library did not load %s\n", argv[2]);
		return 5;
	}
	void (*context_created)(void *) = (void (*)(void *))symbol(cupti, "fake_cupti_context_created");
	int (*callbacks_enabled)(void) = (int (*)(void))symbol(cupti, "fake_cupti_launch_callbacks_enabled");
	size_t (*pending)(void) = (size_t (*)(void))symbol(cupti, "fake_cupti_pending");
	uint32_t (*flush)(uint32_t) = (uint32_t (*)(uint32_t))symbol(cupti, "cuptiActivityFlushAll");
	launch = (launch_fn)symbol(cupti, "fake_cupti_launch");
	if (!callbacks_enabled()) {
		fprintf(stderr, "host: the library did not enable cuLaunchKernel callbacks\n");
		return 6;
	}

	context_created((void *)0x1000);
	pthread_barrier_init(&launched, NULL, 3);
	pthread_barrier_init(&release, NULL, 3);
	pthread_t threads[2];
	pthread_create(&threads[0], NULL, trainer, NULL);
	pthread_create(&threads[1], NULL, loader, NULL);
	pthread_barrier_wait(&launched);
	flush(1 /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */);
	if (pending() != 0) {
		fprintf(stderr, "host: %zu kernels not flushed\n", pending());
		return 7;
	}
	printf("launched %d\n", gemm_launches + copy_launches);
	fflush(stdout);

	/* The test reads the flamegraph while both threads are alive. */
	while (getchar() != EOF)
		;
	pthread_barrier_wait(&release);
	pthread_join(threads[0], NULL);
	pthread_join(threads[1], NULL);

	for (int i = 0; i < final_launches; i++)
		launch(FINAL, FINAL_NS);
	/* No flush: the library's atexit handler sends these. */
	return 0;
}
