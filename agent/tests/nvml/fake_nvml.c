/*
 * A stand-in for libnvidia-ml, for tests on machines without an NVIDIA
 * driver: what the agent's src/nvml loads through KILN_NVML_PATH (or
 * Nvml::open_path) when no GPU is there.
 *
 * It exports the NVML functions the agent calls, with nvml.h's signatures,
 * over two fake GPUs:
 *
 *   GPU 0  "Kiln Fake H100", every metric, compute processes 1001 and 1002
 *   GPU 1  "Kiln Fake T4", NVML_ERROR_NOT_SUPPORTED for power and PCIe,
 *          compute process 2001
 *
 * Every value is base + step * n, where n counts the earlier calls for
 * that metric on that GPU (see the table in the agent's tests/nvml.rs),
 * so values change between passes and a test can predict them exactly.
 *
 * Built with:
 *   -DOMIT_MEMORY_INFO  without nvmlDeviceGetMemoryInfo (a missing symbol)
 *   -DNO_V3             without nvmlDeviceGetComputeRunningProcesses_v3
 *                       (a driver before R510: _v2 only)
 *   -DCC_V3             as an R535 driver: _v3 writes 32-byte rows (with
 *                       usedGpuCcProtectedMemory), and the library has
 *                       nvmlDeviceGetConfComputeMemSizeInfo but not
 *                       nvmlDeviceGetRunningProcessDetailList
 *   -DINIT_RESULT=n     nvmlInit_v2 answers n
 *
 * The test drives it through the fake_nvml_* functions at the bottom.
 * Layouts mirror the agent's src/nvml/abi.rs; the _Static_asserts pin
 * them. If you change one side, change the other.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9

#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_TEMPERATURE_GPU 0
#define NVML_PCIE_UTIL_TX_BYTES 0
#define NVML_PCIE_UTIL_RX_BYTES 1
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

#ifndef INIT_RESULT
#define INIT_RESULT NVML_SUCCESS
#endif

typedef struct {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

/* R535's nvmlProcessInfo_t. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
	unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_cc_t;

_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlProcessInfo_v2_t) == 24, "nvmlProcessInfo_v2_t");
_Static_assert(offsetof(nvmlProcessInfo_v2_t, usedGpuMemory) == 8, "usedGpuMemory");
_Static_assert(offsetof(nvmlProcessInfo_v2_t, gpuInstanceId) == 16, "gpuInstanceId");
_Static_assert(sizeof(nvmlProcessInfo_cc_t) == 32, "nvmlProcessInfo_cc_t");

/* What each metric's calls are counted under. */
enum slot { UTILIZATION, SM_CLOCK, MEM_CLOCK, MEMORY, POWER, TEMPERATURE, PCIE_TX, PCIE_RX, PROCESSES, SLOTS };

#define GPUS 2
#define MAX_PROCESSES 4096

struct fake_gpu {
	const char *name;
	const char *uuid;
	unsigned long long total_memory;
	int has_power_and_pcie;
	unsigned int processes;
	unsigned int first_pid;
	int memory_not_available;
	unsigned int calls[SLOTS];
};

typedef struct fake_gpu *nvmlDevice_t;

static struct fake_gpu gpus[GPUS] = {
	{ "Kiln Fake H100", "GPU-00000000-1111-2222-3333-444444444444", 80ULL << 30, 1, 2, 1001, 0, { 0 } },
	{ "Kiln Fake T4", "GPU-55555555-6666-7777-8888-999999999999", 16ULL << 30, 0, 1, 2001, 0, { 0 } },
};
static int initialized;
static unsigned int insufficient_answers;

/* The call number for `slot` on `gpu`, counting this one from 0. */
static unsigned int next(nvmlDevice_t gpu, enum slot slot)
{
	return __atomic_fetch_add(&gpu->calls[slot], 1, __ATOMIC_RELAXED);
}

static int valid(nvmlDevice_t gpu)
{
	return gpu == &gpus[0] || gpu == &gpus[1];
}

#define CHECK(gpu, out)                                    \
	do {                                               \
		if (!__atomic_load_n(&initialized, __ATOMIC_RELAXED)) \
			return NVML_ERROR_UNINITIALIZED;   \
		if (!valid(gpu) || !(out))                 \
			return NVML_ERROR_INVALID_ARGUMENT; \
	} while (0)

nvmlReturn_t nvmlInit_v2(void)
{
	if (INIT_RESULT == NVML_SUCCESS)
		__atomic_fetch_add(&initialized, 1, __ATOMIC_RELAXED);
	return INIT_RESULT;
}

nvmlReturn_t nvmlShutdown(void)
{
	if (!__atomic_load_n(&initialized, __ATOMIC_RELAXED))
		return NVML_ERROR_UNINITIALIZED;
	__atomic_fetch_sub(&initialized, 1, __ATOMIC_RELAXED);
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	default:
		return "Unknown Error";
	}
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!__atomic_load_n(&initialized, __ATOMIC_RELAXED))
		return NVML_ERROR_UNINITIALIZED;
	*count = GPUS;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!__atomic_load_n(&initialized, __ATOMIC_RELAXED))
		return NVML_ERROR_UNINITIALIZED;
	if (index >= GPUS || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &gpus[index];
	return NVML_SUCCESS;
}

static nvmlReturn_t copy_text(const char *text, char *out, unsigned int length)
{
	if (strlen(text) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(out, text, strlen(text) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	CHECK(device, name);
	return copy_text(device->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	CHECK(device, uuid);
	return copy_text(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	CHECK(device, utilization);
	unsigned int n = next(device, UTILIZATION);
	unsigned int i = (unsigned int)(device - gpus);
	utilization->gpu = 40 + 10 * i + n;
	utilization->memory = 20 + i + n;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
	CHECK(device, clock);
	unsigned int i = (unsigned int)(device - gpus);
	switch (type) {
	case NVML_CLOCK_SM:
		*clock = 1400 + 100 * i + next(device, SM_CLOCK);
		return NVML_SUCCESS;
	case NVML_CLOCK_MEM:
		*clock = 2600 + 100 * i + next(device, MEM_CLOCK);
		return NVML_SUCCESS;
	default:
		return NVML_ERROR_INVALID_ARGUMENT;
	}
}

#ifndef OMIT_MEMORY_INFO
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	CHECK(device, memory);
	unsigned int i = (unsigned int)(device - gpus);
	memory->total = device->total_memory;
	memory->used = (i + 1ULL) * (1ULL << 30) + next(device, MEMORY) * (1ULL << 20);
	memory->free = memory->total - memory->used;
	return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
	CHECK(device, power);
	if (!device->has_power_and_pcie)
		return NVML_ERROR_NOT_SUPPORTED;
	*power = 123456 + 1000 * next(device, POWER);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temperature)
{
	CHECK(device, temperature);
	if (sensor != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	*temperature = 60 + (unsigned int)(device - gpus) + next(device, TEMPERATURE);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int *value)
{
	CHECK(device, value);
	if (!device->has_power_and_pcie)
		return NVML_ERROR_NOT_SUPPORTED;
	switch (counter) {
	case NVML_PCIE_UTIL_TX_BYTES:
		*value = 1000 + next(device, PCIE_TX);
		return NVML_SUCCESS;
	case NVML_PCIE_UTIL_RX_BYTES:
		*value = 2000 + next(device, PCIE_RX);
		return NVML_SUCCESS;
	default:
		return NVML_ERROR_INVALID_ARGUMENT;
	}
}

/* The running-process calls: rows of `stride` bytes, the NVML contract
 * for the count (too small, or no array: the count needed and
 * INSUFFICIENT_SIZE, unless there is nothing to report). */
static nvmlReturn_t running(nvmlDevice_t device, unsigned int *count, void *infos, size_t stride)
{
	CHECK(device, count);
	unsigned int processes = __atomic_load_n(&device->processes, __ATOMIC_RELAXED);
	if (processes == 0) {
		*count = 0;
		return NVML_SUCCESS;
	}
	if (!infos || *count < processes) {
		*count = processes;
		__atomic_fetch_add(&insufficient_answers, 1, __ATOMIC_RELAXED);
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	unsigned int n = next(device, PROCESSES);
	for (unsigned int p = 0; p < processes; p++) {
		nvmlProcessInfo_cc_t row = {
			.pid = device->first_pid + p,
			.usedGpuMemory = device->memory_not_available
				? NVML_VALUE_NOT_AVAILABLE
				: (256ULL << 20) * (p + 1) + (1ULL << 20) * n,
			.gpuInstanceId = 0xFFFFFFFF,
			.computeInstanceId = 0xFFFFFFFF,
			.usedGpuCcProtectedMemory = 0xDEADBEEFDEADBEEFULL,
		};
		/* Only `stride` bytes a row: a v2 row is the start of the CC one. */
		memcpy((char *)infos + p * stride, &row, stride);
	}
	*count = processes;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_v2_t *infos)
{
	return running(device, count, infos, sizeof(nvmlProcessInfo_v2_t));
}

#ifndef NO_V3
#ifdef CC_V3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_cc_t *infos)
{
	return running(device, count, infos, sizeof(nvmlProcessInfo_cc_t));
}

/* Only there to be found: R535 has it. */
nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, void *info)
{
	(void)device;
	(void)info;
	return NVML_ERROR_NOT_SUPPORTED;
}
#else
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_v2_t *infos)
{
	return running(device, count, infos, sizeof(nvmlProcessInfo_v2_t));
}
#endif
#endif

/* The test's hooks. */

/* Sets how many compute processes GPU `index` has (pids first_pid, +1, …). */
void fake_nvml_set_processes(unsigned int index, unsigned int processes)
{
	if (index < GPUS && processes <= MAX_PROCESSES)
		__atomic_store_n(&gpus[index].processes, processes, __ATOMIC_RELAXED);
}

/* Makes GPU `index` report NVML_VALUE_NOT_AVAILABLE as processes' memory. */
void fake_nvml_hide_process_memory(unsigned int index)
{
	if (index < GPUS)
		gpus[index].memory_not_available = 1;
}

/* How many times a running-process call answered INSUFFICIENT_SIZE. */
unsigned int fake_nvml_insufficient_answers(void)
{
	return __atomic_load_n(&insufficient_answers, __ATOMIC_RELAXED);
}

/* nvmlInit_v2 calls not balanced by nvmlShutdown yet. */
int fake_nvml_initialized(void)
{
	return __atomic_load_n(&initialized, __ATOMIC_RELAXED);
}
