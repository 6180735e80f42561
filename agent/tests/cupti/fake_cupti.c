/*
 * A stand-in for libcupti, for tests on machines without a GPU: what
 * libkiln_cuda.so finds through KILN_CUPTI_PATH when no CUDA can run.
 *
 * It exports exactly the functions gpu-lib's RealCupti::from_library
 * requires (gpu-lib/src/cupti/real.rs) and none of the optional ones
 * (cuptiGetResultString, cuptiPCSampling*, cuptiGetCubinCrc), so the
 * library runs with PC sampling unsupported. It keeps the activity buffer
 * callbacks and the one subscriber the library registers, and what it
 * enabled, and the test drives it through the fake_cupti_* hooks below as
 * the CUDA driver would drive the real one:
 *
 *   fake_cupti_context_created(ctx)    the resource callback of a new context
 *   fake_cupti_launch(name, ns)        a cuLaunchKernel: the driver-API
 *                                      callback at API_ENTER and API_EXIT on
 *                                      the calling thread; the kernel "runs"
 *                                      for ns nanoseconds
 *   cuptiActivityFlushAll(flag)        requests a buffer, writes a kernel
 *                                      record for every launch not reported
 *                                      yet and completes the buffer
 *
 * Layouts mirror gpu-lib/src/cupti/abi.rs (CallbackData, ResourceData,
 * kernel_record) and the kernel record gpu-lib/src/activity.rs's synth
 * module writes (CUpti_ActivityKernel9, 200 bytes); the _Static_asserts
 * pin every offset the library reads. If you change one side, change the
 * other.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* CUptiResult values. */
#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_INVALID_PARAMETER 1
#define CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

/* CUpti_ActivityKind, CUpti_CallbackDomain, callback ids, sites. */
#define ACTIVITY_KIND_CONCURRENT_KERNEL 10
#define DOMAIN_DRIVER_API 1
#define DOMAIN_RESOURCE 3
#define DOMAIN_COUNT 8
#define CBID_LAUNCH_KERNEL 307 /* cuLaunchKernel */
#define CBID_RESOURCE_CONTEXT_CREATED 1
#define MAX_CBID 1024
#define API_ENTER 0
#define API_EXIT 1

typedef void (*callback_func)(void *userdata, uint32_t domain, uint32_t cbid, const void *cbdata);
typedef void (*buffer_requested_func)(uint8_t **buffer, size_t *size, size_t *max_num_records);
typedef void (*buffer_completed_func)(void *context, uint32_t stream_id, uint8_t *buffer,
				      size_t size, size_t valid_size);

/* CUpti_CallbackData (abi.rs CallbackData). */
struct callback_data {
	uint32_t callback_site;
	const char *function_name;
	const void *function_params;
	void *function_return_value;
	const char *symbol_name;
	void *context;
	uint32_t context_uid;
	uint64_t *correlation_data;
	uint32_t correlation_id;
};
_Static_assert(sizeof(struct callback_data) == 72, "CallbackData size");
_Static_assert(offsetof(struct callback_data, function_name) == 8, "function_name");
_Static_assert(offsetof(struct callback_data, symbol_name) == 32, "symbol_name");
_Static_assert(offsetof(struct callback_data, context) == 40, "context");
_Static_assert(offsetof(struct callback_data, context_uid) == 48, "context_uid");
_Static_assert(offsetof(struct callback_data, correlation_data) == 56, "correlation_data");
_Static_assert(offsetof(struct callback_data, correlation_id) == 64, "correlation_id");

/* CUpti_ResourceData (abi.rs ResourceData). */
struct resource_data {
	void *context;
	void *resource_handle;
	void *resource_descriptor;
};
_Static_assert(sizeof(struct resource_data) == 24, "ResourceData size");

/* CUpti_ActivityKernel9, the fields abi.rs's kernel_record reads named,
 * the others kept as padding (the real struct is packed, but every field
 * sits at its natural alignment, so this one needs no packing). */
struct kernel_record {
	uint32_t kind;			/* 0 */
	uint8_t _config[12];		/* cacheConfig … partitionedGlobalCacheExecuted */
	uint64_t start;			/* 16, ns */
	uint64_t end;			/* 24, ns */
	uint64_t completed;		/* 32 */
	uint32_t device_id;		/* 40 */
	uint32_t context_id;		/* 44 */
	uint32_t stream_id;		/* 48 */
	int32_t grid[3];		/* 52 */
	int32_t block[3];		/* 64 */
	uint8_t _memory[16];		/* 76: shared and local memory sizes */
	uint32_t correlation_id;	/* 92 */
	int64_t grid_id;		/* 96 */
	const char *name;		/* 104 */
	uint8_t _queued[32];		/* 112: reserved0, queued, submitted, launch type */
	uint64_t graph_node_id;		/* 144 */
	uint32_t shmem_limit_config;	/* 152 */
	uint32_t graph_id;		/* 156 */
	uint8_t _tail[40];		/* 160: access policy, channel, cluster */
};
_Static_assert(offsetof(struct kernel_record, start) == 16, "START");
_Static_assert(offsetof(struct kernel_record, end) == 24, "END");
_Static_assert(offsetof(struct kernel_record, device_id) == 40, "DEVICE_ID");
_Static_assert(offsetof(struct kernel_record, context_id) == 44, "CONTEXT_ID");
_Static_assert(offsetof(struct kernel_record, stream_id) == 48, "STREAM_ID");
_Static_assert(offsetof(struct kernel_record, grid) == 52, "GRID");
_Static_assert(offsetof(struct kernel_record, block) == 64, "BLOCK");
_Static_assert(offsetof(struct kernel_record, correlation_id) == 92, "CORRELATION_ID");
_Static_assert(offsetof(struct kernel_record, name) == 104, "NAME");
_Static_assert(offsetof(struct kernel_record, graph_node_id) == 144, "GRAPH_NODE_ID");
_Static_assert(offsetof(struct kernel_record, graph_id) == 156, "GRAPH_ID");
_Static_assert(sizeof(struct kernel_record) == 200, "KERNEL9_LEN");
_Static_assert(sizeof(struct kernel_record) % 8 == 0, "ACTIVITY_RECORD_ALIGNMENT");

/* A launch whose kernel has not been reported in a buffer yet. */
struct pending {
	uint32_t correlation_id;
	const char *name;
	uint64_t start, end;
};

#define MAX_PENDING 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static buffer_requested_func requested;
static buffer_completed_func completed;
static int kernel_activity;
static callback_func subscriber;
static void *subscriber_userdata;
static int subscriber_token;
static uint8_t domain_enabled[DOMAIN_COUNT];
static uint8_t cbid_enabled[DOMAIN_COUNT][MAX_CBID];
static void *current_context;
static uint32_t next_correlation_id = 1;
static struct pending pending[MAX_PENDING];
static size_t pending_count;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The subscriber, if the library enabled (domain, cbid). */
static callback_func enabled_subscriber(uint32_t domain, uint32_t cbid, void **userdata)
{
	callback_func cb = NULL;
	pthread_mutex_lock(&lock);
	if (subscriber && domain < DOMAIN_COUNT && cbid < MAX_CBID &&
	    (domain_enabled[domain] || cbid_enabled[domain][cbid])) {
		cb = subscriber;
		*userdata = subscriber_userdata;
	}
	pthread_mutex_unlock(&lock);
	return cb;
}

/* ---- the CUPTI functions RealCupti::from_library requires ---- */

EXPORT uint32_t cuptiActivityEnable(uint32_t kind)
{
	pthread_mutex_lock(&lock);
	if (kind == ACTIVITY_KIND_CONCURRENT_KERNEL)
		kernel_activity = 1;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT uint32_t cuptiActivityRegisterCallbacks(buffer_requested_func req, buffer_completed_func comp)
{
	if (!req || !comp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	requested = req;
	completed = comp;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT uint32_t cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	for (;;) {
		pthread_mutex_lock(&lock);
		buffer_requested_func req = requested;
		buffer_completed_func comp = completed;
		int any = kernel_activity && pending_count > 0;
		pthread_mutex_unlock(&lock);
		if (!req || !comp || !any)
			return CUPTI_SUCCESS;

		uint8_t *buffer = NULL;
		size_t size = 0, max_records = 0;
		req(&buffer, &size, &max_records);
		if (!buffer || size < sizeof(struct kernel_record))
			return CUPTI_SUCCESS; /* refused: the records wait */

		size_t valid = 0;
		pthread_mutex_lock(&lock);
		size_t fit = size / sizeof(struct kernel_record);
		if (max_records && max_records < fit)
			fit = max_records;
		size_t n = pending_count < fit ? pending_count : fit;
		for (size_t i = 0; i < n; i++) {
			struct kernel_record r;
			memset(&r, 0, sizeof r);
			r.kind = ACTIVITY_KIND_CONCURRENT_KERNEL;
			r.start = pending[i].start;
			r.end = pending[i].end;
			r.completed = pending[i].end;
			r.device_id = 0;
			r.context_id = 1;
			r.stream_id = 7;
			r.grid[0] = 128, r.grid[1] = 1, r.grid[2] = 1;
			r.block[0] = 256, r.block[1] = 1, r.block[2] = 1;
			r.correlation_id = pending[i].correlation_id;
			r.name = pending[i].name;
			memcpy(buffer + valid, &r, sizeof r);
			valid += sizeof r;
		}
		memmove(pending, pending + n, (pending_count - n) * sizeof pending[0]);
		pending_count -= n;
		pthread_mutex_unlock(&lock);
		comp(current_context, 7, buffer, size, valid);
	}
}

EXPORT uint32_t cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record)
{
	if (!buffer || !record)
		return CUPTI_ERROR_INVALID_PARAMETER;
	uint8_t *next = *record ? (uint8_t *)*record + sizeof(struct kernel_record) : buffer;
	if ((size_t)(next - buffer) + sizeof(struct kernel_record) > valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*record = next;
	return CUPTI_SUCCESS;
}

EXPORT uint32_t cuptiSubscribe(void **handle, callback_func callback, void *userdata)
{
	if (!handle || !callback)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	if (subscriber) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	}
	subscriber = callback;
	subscriber_userdata = userdata;
	pthread_mutex_unlock(&lock);
	*handle = &subscriber_token;
	return CUPTI_SUCCESS;
}

EXPORT uint32_t cuptiEnableCallback(uint32_t enable, void *handle, uint32_t domain, uint32_t cbid)
{
	if (handle != &subscriber_token || domain >= DOMAIN_COUNT || cbid >= MAX_CBID)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	cbid_enabled[domain][cbid] = enable != 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT uint32_t cuptiEnableDomain(uint32_t enable, void *handle, uint32_t domain)
{
	if (handle != &subscriber_token || domain >= DOMAIN_COUNT)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	domain_enabled[domain] = enable != 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

EXPORT uint32_t cuptiGetTimestamp(uint64_t *timestamp)
{
	if (!timestamp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*timestamp = now_ns();
	return CUPTI_SUCCESS;
}

/* ---- test hooks ---- */

/* The driver created `ctx` (the resource domain's CONTEXT_CREATED). */
EXPORT void fake_cupti_context_created(void *ctx)
{
	pthread_mutex_lock(&lock);
	current_context = ctx;
	pthread_mutex_unlock(&lock);
	void *userdata = NULL;
	callback_func cb = enabled_subscriber(DOMAIN_RESOURCE, CBID_RESOURCE_CONTEXT_CREATED, &userdata);
	if (!cb)
		return;
	struct resource_data data = { .context = ctx };
	cb(userdata, DOMAIN_RESOURCE, CBID_RESOURCE_CONTEXT_CREATED, &data);
}

/* A cuLaunchKernel of `name` (a string that outlives the library, as
 * CUPTI's names do) on the calling thread, running `duration_ns` on the
 * GPU. Returns the correlation id it was given. */
EXPORT uint32_t fake_cupti_launch(const char *name, uint64_t duration_ns)
{
	pthread_mutex_lock(&lock);
	uint32_t correlation_id = next_correlation_id++;
	void *ctx = current_context;
	pthread_mutex_unlock(&lock);

	uint64_t scratch = 0;
	struct { void *f; } params = { 0 }; /* cuLaunchKernel_params, unread */
	struct callback_data data = {
		.callback_site = API_ENTER,
		.function_name = "cuLaunchKernel",
		.function_params = &params,
		.symbol_name = name,
		.context = ctx,
		.context_uid = 1,
		.correlation_data = &scratch,
		.correlation_id = correlation_id,
	};
	void *userdata = NULL;
	callback_func cb = enabled_subscriber(DOMAIN_DRIVER_API, CBID_LAUNCH_KERNEL, &userdata);
	if (cb)
		cb(userdata, DOMAIN_DRIVER_API, CBID_LAUNCH_KERNEL, &data);

	uint64_t start = now_ns();
	pthread_mutex_lock(&lock);
	/* A full table loses the kernel, as a full CUPTI buffer would. */
	if (pending_count < MAX_PENDING)
		pending[pending_count++] = (struct pending){ correlation_id, name, start, start + duration_ns };
	pthread_mutex_unlock(&lock);

	if (cb) {
		int result = 0; /* CUDA_SUCCESS */
		data.callback_site = API_EXIT;
		data.function_return_value = &result;
		cb(userdata, DOMAIN_DRIVER_API, CBID_LAUNCH_KERNEL, &data);
	}
	return correlation_id;
}

/* Kernels launched and not yet written to a buffer. */
EXPORT size_t fake_cupti_pending(void)
{
	pthread_mutex_lock(&lock);
	size_t n = pending_count;
	pthread_mutex_unlock(&lock);
	return n;
}

/* Whether the library subscribed and enabled cuLaunchKernel callbacks. */
EXPORT int fake_cupti_launch_callbacks_enabled(void)
{
	void *userdata = NULL;
	return enabled_subscriber(DOMAIN_DRIVER_API, CBID_LAUNCH_KERNEL, &userdata) != NULL;
}
