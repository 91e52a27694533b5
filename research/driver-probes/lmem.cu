// Does a kernel that needs more local memory move the context's allocations (and free a range
// that later cudaMallocs fill)? Prints cudaMalloc addresses relative to the first, free memory,
// the stack limit, and the mappings that changed (within 8 GiB of the first allocation).
#include <cuda_runtime.h>
#include <cstdio>
#include <set>
#include <string>
typedef unsigned long long ull;
static ull first = 0;
static std::set<std::string> last;
static void maps(const char* tag) {
  FILE* m = fopen("/proc/self/maps", "r"); char line[512]; std::set<std::string> cur;
  while (fgets(line, sizeof line, m)) {
    ull s, e; if (sscanf(line, "%llx-%llx", &s, &e) < 2) continue;
    if (e + (8ull << 30) < first || s > first + (8ull << 30)) continue;
    char b[160]; long long rs = (long long)(s - first) >> 20, re = (long long)(e - first) >> 20;
    char perms[8] = ""; char path[200] = ""; sscanf(line, "%*s %7s %*s %*s %*s %199s", perms, path);
    snprintf(b, sizeof b, "[%lld, %lld) MiB %s %s", rs, re, perms, path); cur.insert(b);
  }
  fclose(m);
  for (auto& x : last) if (!cur.count(x)) printf("  %s gone: %s\n", tag, x.c_str());
  for (auto& x : cur) if (!last.count(x)) printf("  %s new: %s\n", tag, x.c_str());
  last = cur;
}
static ull freemem() { size_t f, t; cudaMemGetInfo(&f, &t); return f; }
static void* m(ull mib) {
  void* p; ull b = freemem(); cudaMalloc(&p, mib << 20);
  if (!first) first = (ull)p;
  printf("malloc %llu MiB -> %lld MiB (free -%llu MiB)\n", mib, ((long long)((ull)p - first)) >> 20, (b - freemem()) >> 20);
  maps("malloc"); return p;
}
template <int N> __global__ void big_stack(int* out, int k) {
  volatile int buf[N];
  for (int i = 0; i < N; i++) buf[i] = i * k;
  out[blockIdx.x * blockDim.x + threadIdx.x] = buf[(threadIdx.x * 7 + k) % N];
}
int main() {
  size_t st; cudaDeviceGetLimit(&st, cudaLimitStackSize);
  printf("info free=%llu stack=%zu\n", freemem(), st);
  int* out; m(20); cudaMalloc(&out, 64 << 20);
  m(20); m(20); m(2); m(2);
  ull b = freemem();
  big_stack<1024><<<1024, 1024>>>(out, 3); cudaDeviceSynchronize();
  cudaDeviceGetLimit(&st, cudaLimitStackSize);
  printf("kernel 4 KiB local: free -%lld MiB, stack=%zu, err=%s\n", ((long long)b - (long long)freemem()) >> 20, st, cudaGetErrorString(cudaGetLastError()));
  maps("kernel4k");
  m(20); m(20); m(2); m(14); m(18);
  b = freemem();
  big_stack<8192><<<1024, 1024>>>(out, 5); cudaDeviceSynchronize();
  cudaDeviceGetLimit(&st, cudaLimitStackSize);
  printf("kernel 32 KiB local: free -%lld MiB, stack=%zu, err=%s\n", ((long long)b - (long long)freemem()) >> 20, st, cudaGetErrorString(cudaGetLastError()));
  maps("kernel32k");
  m(20); m(20); m(2); m(14); m(18); m(64);
  return 0;
}
