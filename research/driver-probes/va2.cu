// va seq with /proc/self/maps: after each op, the mappings within 64 GiB of the first
// allocation, printed when they changed ('M start end perms path' lines after an 'maps' line).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
typedef unsigned long long ull;
static ull first = 0;
static std::string last;
static void dump_maps() {
  FILE* m = fopen("/proc/self/maps", "r");
  char line[512]; std::string cur;
  while (fgets(line, sizeof line, m)) {
    ull s, e; char perms[8]; char path[256] = "";
    if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %255s", &s, &e, perms, path) < 3) continue;
    if (first && (e + (64ull << 30) < first || s > first + (64ull << 30))) continue;
    char buf[400]; snprintf(buf, sizeof buf, "M %llu %llu %s %s\n", s, e, perms, path);
    cur += buf;
  }
  fclose(m);
  if (cur != last) { printf("maps\n%s", cur.c_str()); last = cur; }
}
static ull freemem() { size_t f, t; cudaMemGetInfo(&f, &t); return f; }
int main(int argc, char** argv) {
  size_t f0, t0; cudaMemGetInfo(&f0, &t0);
  printf("info total=%llu free_after_context=%llu context=%llu\n", (ull)t0, (ull)f0, (ull)(t0 - f0));
  FILE* fp = fopen(argv[1], "r");
  bool maps = argc > 2;
  char op; ull id, size; std::map<ull, std::pair<void*, ull>> live; char line[256];
  while (fgets(line, sizeof line, fp)) {
    if (line[0] == 'a') {
      sscanf(line, "%c %llu %llu", &op, &id, &size);
      ull before = freemem(); void* p = nullptr;
      if (cudaMalloc(&p, size) != cudaSuccess) { printf("a %llu %llu OOM\n", id, size); cudaGetLastError(); continue; }
      live[id] = {p, size};
      if (!first) first = (ull)p;
      printf("a %llu %llu %llu %llu\n", id, size, (ull)p, before - freemem());
    } else if (line[0] == 'f') {
      sscanf(line, "%c %llu", &op, &id);
      auto it = live.find(id); if (it == live.end()) continue;
      cudaFree(it->second.first);
      printf("f %llu %llu %llu\n", id, it->second.second, (ull)it->second.first);
      live.erase(it);
    }
    if (maps) dump_maps();
  }
  return 0;
}
