/*
 * A stand-in for NVML, libnvidia-ml.so.1 (test only): initialisation, the
 * devices by index, their UUIDs and memory info (v1 and v2, with v2's
 * version check and a reserved share as the real one reports), over the
 * GPUs of fakegpus.h.
 */
#include "fakegpus.h"

typedef int nvmlReturn_t;
typedef struct fake_gpu *nvmlDevice_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24)))
/* What the real NVML counts as reserved by the driver (a share of total). */
#define RESERVED(g) ((g)->total / 128 < (g)->total - (g)->free ? (g)->total / 128 : (g)->total - (g)->free)

#define API __attribute__((visibility("default")))

static int initialized;

API nvmlReturn_t nvmlInit_v2(void) { fake_load(); initialized = 1; return NVML_SUCCESS; }
API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
API nvmlReturn_t nvmlShutdown(void) { initialized = 0; return NVML_SUCCESS; }
API const char *nvmlErrorString(nvmlReturn_t r) { return r ? "stand-in error" : "Success"; }

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!n)
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = (unsigned int)fake_count;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!d || i >= (unsigned int)fake_count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &fake_gpus[i];
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!d || !buf)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(d->uuid) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	strcpy(buf, d->uuid);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!d || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = d->total;
	m->free = d->free;
	m->used = d->total - d->free;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!d || !m)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	m->total = d->total;
	m->reserved = RESERVED(d);
	m->free = d->free;
	m->used = d->total - d->free - m->reserved;
	return NVML_SUCCESS;
}
