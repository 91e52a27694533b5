// Probes of the CUDA driver's stream-ordered pool (cudaMallocAsync) and of cudaMalloc's
// granularity, plus replays of recorded request sequences against the real driver.
// Not part of the project: calibration data for allocreplay's cuda-async / cuda-malloc models.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>
#include <string>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1);} } while (0)

static cudaMemPool_t pool;
static const uint64_t MiB = 1ull << 20;

static uint64_t attr(cudaMemPoolAttr a) { uint64_t v = 0; CK(cudaMemPoolGetAttribute(pool, a, &v)); return v; }
static uint64_t rcur() { return attr(cudaMemPoolAttrReservedMemCurrent); }
static uint64_t rhigh() { return attr(cudaMemPoolAttrReservedMemHigh); }
static uint64_t ucur() { return attr(cudaMemPoolAttrUsedMemCurrent); }
static void set_threshold(uint64_t t) { CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &t)); }
static void reset_pool() {
  CK(cudaDeviceSynchronize());
  CK(cudaMemPoolTrimTo(pool, 0));
  uint64_t z = 0;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &z));
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &z));
  set_threshold(UINT64_MAX);
  if (rcur() != 0) printf("WARN reset: reserved %llu\n", (unsigned long long)rcur());
}
static void* am(uint64_t size, cudaStream_t s = 0) { void* p; CK(cudaMallocAsync(&p, size, s)); return p; }
static void af(void* p, cudaStream_t s = 0) { CK(cudaFreeAsync(p, s)); }
#define P(...) do { printf(__VA_ARGS__); printf("\n"); fflush(stdout);} while (0)
typedef unsigned long long ull;

static void probes() {
  // P1: single allocations of various sizes in an empty pool.
  uint64_t sizes[] = {1, 512, 4096, 1 * MiB, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 3 * MiB, 33 * MiB, 100 * MiB + 1, 1000 * MiB, 3000 * MiB};
  for (uint64_t s : sizes) {
    reset_pool();
    void* p = am(s);
    P("P1 size=%llu reserved=%llu used=%llu addr=%p", (ull)s, (ull)rcur(), (ull)ucur(), p);
    af(p);
  }
  // P2: consecutive small allocations: alignment and packing.
  reset_pool();
  {
    std::vector<void*> v;
    for (int i = 0; i < 2000; i++) v.push_back(am(i < 20 ? 1 : 1024));
    std::string s;
    for (int i = 0; i < 24; i++) { char b[64]; snprintf(b, 64, " %lld", (long long)((char*)v[i] - (char*)v[0])); s += b; }
    P("P2 small offsets:%s", s.c_str());
    P("P2 2000 small allocs reserved=%llu used=%llu", (ull)rcur(), (ull)ucur());
    for (auto p : v) af(p);
  }
  // P3: page sharing between medium allocations: 5 x 1.5 MiB, then 10 x 300 KiB.
  reset_pool();
  {
    std::vector<void*> v;
    for (int i = 0; i < 5; i++) { v.push_back(am(3 * MiB / 2)); P("P3 1.5MiB #%d addr_off=%lld reserved=%llu", i, (long long)((char*)v[i] - (char*)v[0]), (ull)rcur()); }
    for (auto p : v) af(p);
  }
  reset_pool();
  {
    std::vector<void*> v;
    for (int i = 0; i < 12; i++) { v.push_back(am(300 * 1024)); P("P3b 300KiB #%d addr_off=%lld reserved=%llu", i, (long long)((char*)v[i] - (char*)v[0]), (ull)rcur()); }
    for (auto p : v) af(p);
  }
  // P4: fragmentation / remap: A=10MiB, B=10MiB, free A, C=12MiB.
  reset_pool();
  {
    void* a = am(10 * MiB); void* b = am(10 * MiB);
    P("P4 A=%p B=%p reserved=%llu", a, b, (ull)rcur());
    af(a);
    void* c = am(12 * MiB);
    P("P4 C=%p reserved=%llu (C-A=%lld)", c, (ull)rcur(), (long long)((char*)c - (char*)a));
    void* d = am(8 * MiB);
    P("P4 D(8MiB)=%p reserved=%llu (D-A=%lld)", d, (ull)rcur(), (long long)((char*)d - (char*)a));
    af(b); af(c); af(d);
  }
  // P5: fit policy: blocks [4,g,8,g,6,g] MiB, g = 2 MiB guards; free 4, 8, 6; ask 6, then 4, then 8.
  reset_pool();
  {
    uint64_t sz[] = {4, 2, 8, 2, 6, 2};
    void* v[6];
    for (int i = 0; i < 6; i++) v[i] = am(sz[i] * MiB);
    std::string s;
    for (int i = 0; i < 6; i++) { char b[64]; snprintf(b, 64, " %lld", (long long)((char*)v[i] - (char*)v[0])); s += b; }
    P("P5 layout offsets:%s reserved=%llu", s.c_str(), (ull)rcur());
    af(v[0]); af(v[2]); af(v[4]);
    void* x = am(6 * MiB); P("P5 ask6 -> off %lld", (long long)((char*)x - (char*)v[0]));
    void* y = am(4 * MiB); P("P5 ask4 -> off %lld", (long long)((char*)y - (char*)v[0]));
    void* z = am(8 * MiB); P("P5 ask8 -> off %lld reserved=%llu", (long long)((char*)z - (char*)v[0]), (ull)rcur());
    af(x); af(y); af(z); af(v[1]); af(v[3]); af(v[5]);
  }
  // P5b: split of a large free block: free 20 MiB, ask 3 MiB then 1 KiB.
  reset_pool();
  {
    void* a = am(20 * MiB); void* g = am(2 * MiB);
    af(a);
    void* b = am(3 * MiB); void* c = am(1024);
    P("P5b a=%p b-a=%lld c-a=%lld reserved=%llu", a, (long long)((char*)b - (char*)a), (long long)((char*)c - (char*)a), (ull)rcur());
    af(b); af(c); af(g);
  }
  // P6: growth steps.
  reset_pool();
  {
    std::vector<void*> v; std::string s;
    for (int i = 0; i < 48; i++) { v.push_back(am(1 * MiB)); char b[32]; snprintf(b, 32, " %llu", (ull)(rcur() / MiB)); s += b; }
    P("P6 1MiB allocs reserved MiB:%s", s.c_str());
    for (auto p : v) af(p);
  }
  reset_pool();
  {
    std::vector<void*> v; std::string s;
    for (int i = 0; i < 24; i++) { v.push_back(am(100 * MiB + 12345)); char b[48]; snprintf(b, 48, " %llu/%lld", (ull)(rcur() / MiB), (long long)((char*)v[i] - (char*)v[0]) / (long long)MiB); s += b; }
    P("P6 100MiB allocs reserved MiB/offset MiB:%s", s.c_str());
    for (auto p : v) af(p);
  }
  reset_pool();
  {
    std::vector<void*> v; std::string s;
    for (int i = 0; i < 40; i++) { v.push_back(am(7 * MiB + 100)); char b[48]; snprintf(b, 48, " %llu/%lld", (ull)(rcur() / MiB), (long long)((char*)v[i] - (char*)v[0]) / 1024); s += b; }
    P("P6 7MiB+100 allocs reserved MiB/offset KiB:%s", s.c_str());
    for (auto p : v) af(p);
  }
  // P7: release threshold. 0: freed memory goes back at the next synchronize.
  reset_pool();
  set_threshold(0);
  {
    void* a = am(100 * MiB);
    af(a);
    P("P7 thr=0 after free reserved=%llu", (ull)rcur());
    CK(cudaStreamSynchronize(0));
    P("P7 thr=0 after sync reserved=%llu", (ull)rcur());
    void* b = am(10 * MiB); void* c = am(30 * MiB);
    af(b); CK(cudaStreamSynchronize(0));
    P("P7 thr=0 live 30MiB (freed 10) after sync reserved=%llu", (ull)rcur());
    af(c); CK(cudaStreamSynchronize(0));
  }
  reset_pool();
  set_threshold(64 * MiB);
  {
    void* a = am(100 * MiB);
    af(a); CK(cudaStreamSynchronize(0));
    P("P7 thr=64MiB freed 100MiB after sync reserved=%llu", (ull)rcur());
    std::vector<void*> v;
    for (int i = 0; i < 10; i++) v.push_back(am(20 * MiB));
    P("P7 thr=64MiB 10x20MiB reserved=%llu", (ull)rcur());
    for (int i = 0; i < 10; i += 2) af(v[i]);
    CK(cudaStreamSynchronize(0));
    P("P7 thr=64MiB freed every other (100MiB live) after sync reserved=%llu", (ull)rcur());
    for (int i = 1; i < 10; i += 2) af(v[i]);
    CK(cudaStreamSynchronize(0));
    P("P7 thr=64MiB all freed after sync reserved=%llu", (ull)rcur());
  }
  reset_pool();
  // P8: cross-stream reuse with idle streams.
  {
    cudaStream_t s1, s2;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    void* a = am(50 * MiB, s1);
    af(a, s1);
    void* b = am(50 * MiB, s2);
    P("P8 free on s1, alloc on s2 immediately: same=%d reserved=%llu", a == b, (ull)rcur());
    af(b, s2);
    CK(cudaDeviceSynchronize());
    void* c = am(50 * MiB, s1);
    af(c, s1);
    CK(cudaStreamSynchronize(s1));
    void* d = am(50 * MiB, s2);
    P("P8 free on s1 + sync, alloc on s2: same=%d reserved=%llu", c == d, (ull)rcur());
    af(d, s2);
    CK(cudaDeviceSynchronize());
    CK(cudaStreamDestroy(s1)); CK(cudaStreamDestroy(s2));
  }
  reset_pool();
  // M: cudaMalloc granularity via cudaMemGetInfo.
  {
    uint64_t msz[] = {1, 512, 4096, 64 * 1024, 1 * MiB, 2 * MiB - 512, 2 * MiB, 2 * MiB + 1, 3 * MiB, 5 * MiB + 1};
    for (uint64_t s : msz) {
      size_t f0, f1, t;
      CK(cudaDeviceSynchronize());
      CK(cudaMemGetInfo(&f0, &t));
      std::vector<void*> v;
      for (int i = 0; i < 64; i++) { void* p; CK(cudaMalloc(&p, s)); v.push_back(p); }
      CK(cudaMemGetInfo(&f1, &t));
      std::string o;
      for (int i = 0; i < 6; i++) { char b[48]; snprintf(b, 48, " %lld", (long long)((char*)v[i] - (char*)v[0])); o += b; }
      P("M size=%llu x64 used_delta=%lld per=%lld offsets:%s", (ull)s, (long long)(f0 - f1), (long long)(f0 - f1) / 64, o.c_str());
      for (auto p : v) CK(cudaFree(p));
    }
  }
}

struct Ev { char k; int id; uint64_t size; int stream; int deferred; };

static std::vector<Ev> load(const char* path, int* nalloc, int* nstreams) {
  FILE* f = fopen(path, "r");
  if (!f) { perror(path); exit(1); }
  if (fscanf(f, "%d %d", nalloc, nstreams) != 2) exit(2);
  std::vector<Ev> ev;
  char k;
  while (fscanf(f, " %c", &k) == 1) {
    Ev e{k, 0, 0, 0, 0};
    if (k == 'a') { if (fscanf(f, "%d %llu %d", &e.id, (ull*)&e.size, &e.stream) != 3) exit(3); }
    else if (k == 'r') { if (fscanf(f, "%d %d", &e.id, &e.deferred) != 2) exit(3); }
    else if (k == 'c') { if (fscanf(f, "%d", &e.id) != 1) exit(3); }
    ev.push_back(e);
  }
  fclose(f);
  return ev;
}

// Replays like PyTorch's CUDAMallocAsyncAllocator: cudaMallocAsync on the allocating stream,
// cudaFreeAsync at free time (free_requested) on the creation stream, or, for blocks used on
// several streams (deferred in the native trace), on a unifying stream after event waits.
static void replay_async(const char* path, const char* out) {
  int n, ns;
  auto ev = load(path, &n, &ns);
  reset_pool();
  std::vector<cudaStream_t> st(ns + 1);
  st[0] = 0;
  for (int i = 1; i <= ns; i++) CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
  cudaStream_t unifier = st[ns];
  std::vector<void*> ptr(n, nullptr);
  std::vector<int> sid(n, 0);
  FILE* o = fopen(out, "w");
  for (auto& e : ev) {
    if (e.k == 'a') {
      sid[e.id] = e.stream;
      if (e.size) ptr[e.id] = am(e.size, st[e.stream]);
      fprintf(o, "%d %llu %llu\n", e.id, (ull)(uintptr_t)ptr[e.id], (ull)rcur());
    } else if (e.k == 'r') {
      void* p = ptr[e.id];
      if (!p) continue;
      cudaStream_t cs = st[sid[e.id]];
      if (!e.deferred || ns == 1) {
        af(p, cs);
      } else {
        cudaEvent_t evt;
        for (int s = 0; s < ns; s++) {
          CK(cudaEventCreateWithFlags(&evt, cudaEventDisableTiming));
          CK(cudaEventRecord(evt, st[s]));
          CK(cudaStreamWaitEvent(unifier, evt, 0));
          CK(cudaEventDestroy(evt));
        }
        af(p, unifier);
      }
    }
  }
  CK(cudaDeviceSynchronize());
  P("REPLAY async %s peak_reserved=%llu peak_used=%llu", path, (ull)rhigh(), (ull)attr(cudaMemPoolAttrUsedMemHigh));
  fclose(o);
  for (int i = 1; i <= ns; i++) CK(cudaStreamDestroy(st[i]));
  for (int i = 0; i < n; i++) if (ptr[i]) { /* leaked in trace: free now */ }
  reset_pool();
}

// Every allocation a cudaMalloc, every free a cudaFree; device usage from cudaMemGetInfo.
static void replay_malloc(const char* path, const char* out) {
  int n, ns;
  auto ev = load(path, &n, &ns);
  CK(cudaDeviceSynchronize());
  size_t f0, t, f;
  CK(cudaMemGetInfo(&f0, &t));
  std::vector<void*> ptr(n, nullptr);
  long long peak = 0;
  FILE* o = fopen(out, "w");
  for (auto& e : ev) {
    if (e.k == 'a') {
      if (e.size) CK(cudaMalloc(&ptr[e.id], e.size));
      CK(cudaMemGetInfo(&f, &t));
      long long used = (long long)f0 - (long long)f;
      if (used > peak) peak = used;
      fprintf(o, "%d %llu %lld\n", e.id, (ull)(uintptr_t)ptr[e.id], used);
    } else if (e.k == 'r') {
      if (ptr[e.id]) CK(cudaFree(ptr[e.id]));
      ptr[e.id] = nullptr;
    }
  }
  fclose(o);
  P("REPLAY malloc %s peak_used=%lld", path, peak);
  for (int i = 0; i < n; i++) if (ptr[i]) CK(cudaFree(ptr[i]));
}

int main(int argc, char** argv) {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  std::string mode = argc > 1 ? argv[1] : "probes";
  if (mode == "probes") probes();
  else if (mode == "async") replay_async(argv[2], argv[3]);
  else if (mode == "malloc") replay_malloc(argv[2], argv[3]);
  return 0;
}
