// Probes of the CUDA driver's virtual address placement for cudaMalloc / cuMemAddressReserve.
// ./va info | ./va seq FILE (lines 'a ID SIZE [..]' / 'f ID'): prints 'a ID SIZE ADDR DFREE'
// | ./va vmm : cuMemAddressReserve probes interleaved with cudaMalloc.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <map>
#include <string>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("ERR %s -> %s\n", #x, cudaGetErrorString(e_)); } } while (0)
typedef unsigned long long ull;
static ull freemem() { size_t f, t; cudaMemGetInfo(&f, &t); return f; }
int main(int argc, char** argv) {
  std::string mode = argv[1];
  size_t f0, t0; cudaMemGetInfo(&f0, &t0);
  printf("info total=%llu free_after_context=%llu context=%llu\n", (ull)t0, (ull)f0, (ull)(t0 - f0));
  if (mode == "seq") {
    FILE* fp = fopen(argv[2], "r");
    char op; ull id, size, rec;
    std::map<ull, std::pair<void*, ull>> live;
    char line[256];
    while (fgets(line, sizeof line, fp)) {
      if (line[0] == 'a') {
        sscanf(line, "%c %llu %llu", &op, &id, &size);
        ull before = freemem();
        void* p = nullptr;
        cudaError_t e = cudaMalloc(&p, size);
        if (e != cudaSuccess) { printf("a %llu %llu OOM %s\n", id, size, cudaGetErrorString(e)); cudaGetLastError(); continue; }
        live[id] = {p, size};
        printf("a %llu %llu %llu %llu\n", id, size, (ull)p, before - freemem());
      } else if (line[0] == 'f') {
        sscanf(line, "%c %llu", &op, &id);
        auto it = live.find(id);
        if (it == live.end()) continue;
        CK(cudaFree(it->second.first));
        printf("f %llu %llu %llu\n", id, it->second.second, (ull)it->second.first);
        live.erase(it);
      }
    }
  } else if (mode == "vmm") {
    CUdeviceptr a[8];
    ull sizes[] = {150114795520ull, 150109880320ull + (2ull << 20), 1ull << 30, 20ull << 20};
    void* m1; cudaMalloc(&m1, 20 << 20); printf("malloc20 %llu\n", (ull)m1);
    for (int i = 0; i < 4; i++) {
      CUresult r = cuMemAddressReserve(&a[i], sizes[i], 0, 0, 0);
      printf("reserve %llu -> %d %llu\n", sizes[i], (int)r, (ull)a[i]);
    }
    void* m2; cudaMalloc(&m2, 20 << 20); printf("malloc20 %llu\n", (ull)m2);
    void* m3; cudaMalloc(&m3, 2 << 20); printf("malloc2 %llu\n", (ull)m3);
  }
  return 0;
}
