// LD_PRELOAD shim: logs every cudaMallocAsync / cudaFreeAsync a real program makes, with the
// pool's ReservedMemCurrent after the call. Not part of the project: calibration data for the
// cuda-async model (docs/cuda-policies.md). Build: gcc -O2 -shared -fPIC -o shim.so shim.c -ldl
// Use: ALLOCLOG=/path/log LD_PRELOAD=./shim.so PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 w.py ...
// Log lines: "a ptr size stream reserved t_ns" / "f ptr stream reserved t_ns".
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <pthread.h>

typedef int cudaError_t;
typedef void* cudaStream_t;
typedef void* cudaMemPool_t;
enum { cudaMemPoolAttrReservedMemCurrent = 5 };

static FILE* logf_;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static cudaError_t (*real_malloc)(void**, size_t, cudaStream_t);
static cudaError_t (*real_free)(void*, cudaStream_t);
static cudaError_t (*get_pool)(cudaMemPool_t*, int);
static cudaError_t (*get_attr)(cudaMemPool_t, int, void*);
static cudaError_t (*get_dev)(int*);

static void init(void) {
  if (real_malloc) return;
  real_malloc = dlsym(RTLD_NEXT, "cudaMallocAsync");
  real_free = dlsym(RTLD_NEXT, "cudaFreeAsync");
  get_pool = dlsym(RTLD_NEXT, "cudaDeviceGetDefaultMemPool");
  get_attr = dlsym(RTLD_NEXT, "cudaMemPoolGetAttribute");
  get_dev = dlsym(RTLD_NEXT, "cudaGetDevice");
  const char* p = getenv("ALLOCLOG");
  logf_ = fopen(p ? p : "/tmp/alloclog.txt", "w");
  setvbuf(logf_, NULL, _IOFBF, 1 << 22);
}

static unsigned long long reserved(void) {
  int d = 0; cudaMemPool_t pool; unsigned long long v = 0;
  get_dev(&d);
  if (get_pool(&pool, d) == 0) get_attr(pool, cudaMemPoolAttrReservedMemCurrent, &v);
  return v;
}

static long long now(void) {
  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t s) {
  pthread_mutex_lock(&mu); init();
  cudaError_t e = real_malloc(p, size, s);
  fprintf(logf_, "a %llu %zu %llu %llu %lld\n", (unsigned long long)(uintptr_t)*p, size,
          (unsigned long long)(uintptr_t)s, reserved(), now());
  pthread_mutex_unlock(&mu);
  return e;
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  pthread_mutex_lock(&mu); init();
  cudaError_t e = real_free(p, s);
  fprintf(logf_, "f %llu %llu %llu %lld\n", (unsigned long long)(uintptr_t)p,
          (unsigned long long)(uintptr_t)s, reserved(), now());
  pthread_mutex_unlock(&mu);
  return e;
}

__attribute__((destructor)) static void fini(void) { if (logf_) fflush(logf_); }
