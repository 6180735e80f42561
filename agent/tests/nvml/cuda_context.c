/*
 * Holds a CUDA context with 256 MiB allocated for argv[1] seconds, so
 * that NVML lists this process among the GPU's compute processes. Prints
 * "ready" once it has. Uses the driver API through dlopen: no CUDA
 * headers or toolkit, only the driver, are needed to build and run it.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*cu_init)(unsigned int flags);
typedef int (*cu_device_get)(int *device, int ordinal);
typedef int (*cu_primary_ctx_retain)(void **context, int device);
typedef int (*cu_ctx_set_current)(void *context);
typedef int (*cu_mem_alloc)(unsigned long long *pointer, size_t bytes);

int main(int argc, char **argv)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	cu_init init = (cu_init)dlsym(cuda, "cuInit");
	cu_device_get device_get = (cu_device_get)dlsym(cuda, "cuDeviceGet");
	cu_primary_ctx_retain retain = (cu_primary_ctx_retain)dlsym(cuda, "cuDevicePrimaryCtxRetain");
	cu_ctx_set_current set_current = (cu_ctx_set_current)dlsym(cuda, "cuCtxSetCurrent");
	cu_mem_alloc mem_alloc = (cu_mem_alloc)dlsym(cuda, "cuMemAlloc_v2");
	if (!init || !device_get || !retain || !set_current || !mem_alloc) {
		fprintf(stderr, "libcuda lacks a driver API function\n");
		return 2;
	}
	int device, rc;
	void *context;
	unsigned long long pointer;
	if ((rc = init(0)) || (rc = device_get(&device, 0)) || (rc = retain(&context, device)) ||
	    (rc = set_current(context)) || (rc = mem_alloc(&pointer, 256u << 20))) {
		fprintf(stderr, "CUDA error %d\n", rc);
		return 3;
	}
	printf("ready\n");
	fflush(stdout);
	sleep(argc > 1 ? (unsigned int)atoi(argv[1]) : 30);
	return 0;
}
