/* uopgrad's CUDA emulation header: CUDA C++ on the host (see uopgrad_cuda/emulator.py) */
#include <ucontext.h>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static thread_local
#define __syncthreads() __uopgrad_emu::barrier(__LINE__)
extern "C" {
float sqrtf(float); double sqrt(double); float exp2f(float); double exp2(double);
float log2f(float); double log2(double); float sinf(float); double sin(double);
float truncf(float); double trunc(double); float fmodf(float, float); double fmod(double, double);
float powf(float, float); double pow(double, double); float rintf(float); double rint(double);
float expf(float); double exp(double); float logf(float); double log(double);
float cosf(float); double cos(double); float fabsf(float); double fabs(double);
float floorf(float); double floor(double); float ceilf(float); double ceil(double);
float nextafterf(float, float);
void* malloc(unsigned long); void free(void*);
int snprintf(char*, unsigned long, const char*, ...);
}
struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };
static thread_local uint3 threadIdx, blockIdx;
static thread_local dim3 blockDim, gridDim;
static const int warpSize = 32;
static inline float __int_as_float(int x) { float f; __builtin_memcpy(&f, &x, 4); return f; }
static inline float __uint_as_float(unsigned int x) { float f; __builtin_memcpy(&f, &x, 4); return f; }
static inline int __float_as_int(float x) { int i; __builtin_memcpy(&i, &x, 4); return i; }
static inline unsigned int __float_as_uint(float x) { unsigned int i; __builtin_memcpy(&i, &x, 4); return i; }
static inline long long __double_as_longlong(double x) { long long i; __builtin_memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long x) { double d; __builtin_memcpy(&d, &x, 8); return d; }
static inline float __double2float_rz(double x) {
  /* rounded toward zero: the nearest float, stepped back toward zero when it is farther from zero than x */
  float f = (float)x;
  return (f == f && fabs((double)f) > fabs(x)) ? nextafterf(f, 0.0f) : f;
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#define __UOPGRAD_ATOMIC_INT(T) \
  static inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); } \
  static inline T atomicCAS(T* p, T cmp, T v) { \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return cmp; } \
  static inline T atomicMin(T* p, T v) { T old = __atomic_load_n(p, __ATOMIC_SEQ_CST); \
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
    return old; } \
  static inline T atomicMax(T* p, T v) { T old = __atomic_load_n(p, __ATOMIC_SEQ_CST); \
    while (v > old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
    return old; }
__UOPGRAD_ATOMIC_INT(int)
__UOPGRAD_ATOMIC_INT(unsigned int)
__UOPGRAD_ATOMIC_INT(unsigned long long)
#define __UOPGRAD_ATOMIC_FLOAT(T) \
  static inline T atomicAdd(T* p, T v) { T old, sum; __atomic_load(p, &old, __ATOMIC_SEQ_CST); \
    do { sum = old + v; } while (!__atomic_compare_exchange(p, &old, &sum, false, __ATOMIC_SEQ_CST, \
                                                            __ATOMIC_SEQ_CST)); \
    return old; } \
  static inline T atomicExch(T* p, T v) { T old; __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST); return old; }
__UOPGRAD_ATOMIC_FLOAT(float)
__UOPGRAD_ATOMIC_FLOAT(double)

namespace __uopgrad_emu {
enum { READY, WAITING, DONE };
struct Grid {
  void (*body)(void*); void* ctx;
  unsigned int n, order[1024], state[1024], line[1024];
  ucontext_t sched, threads[1024];
  unsigned int current;
};
static thread_local Grid* grid;
static inline void set_thread(const Grid& g, unsigned int t) {
  threadIdx.x = t % blockDim.x; threadIdx.y = t / blockDim.x % blockDim.y; threadIdx.z = t / (blockDim.x * blockDim.y);
}
static inline void barrier(int line) {
  Grid* g = grid;
  if (!g) return;  /* a kernel without fibers never reaches here: the launcher checks the source */
  g->state[g->current] = WAITING; g->line[g->current] = (unsigned int)line;
  swapcontext(&g->threads[g->current], &g->sched);
}
static void trampoline() {
  Grid* g = grid;
  g->body(g->ctx);
  g->state[g->current] = DONE;
}
static int thread_text(char* out, unsigned long n, unsigned int t) {
  return snprintf(out, n, "(%u,%u,%u)", t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
}
/* one block as fibers, a round per barrier; 0, or -1 with a message in err */
static int run_fibers(Grid& g, char* stacks, unsigned long stack_size, char* err, unsigned long errlen) {
  for (unsigned int i = 0; i < g.n; i++) {
    unsigned int t = g.order[i];
    getcontext(&g.threads[t]);
    g.threads[t].uc_stack.ss_sp = stacks + (unsigned long)t * stack_size;
    g.threads[t].uc_stack.ss_size = stack_size;
    g.threads[t].uc_link = &g.sched;
    makecontext(&g.threads[t], trampoline, 0);
    g.state[t] = READY;
  }
  for (;;) {
    unsigned int waiting = 0, done = 0, first_wait = 0, first_done = 0, other = g.n;
    for (unsigned int i = 0; i < g.n; i++) {
      unsigned int t = g.order[i];
      if (g.state[t] == DONE) continue;
      g.current = t; set_thread(g, t);
      swapcontext(&g.sched, &g.threads[t]);
    }
    for (unsigned int i = 0; i < g.n; i++) {
      unsigned int t = g.order[i];
      if (g.state[t] == WAITING) { if (!waiting++) first_wait = t; else if (g.line[t] != g.line[first_wait] && other == g.n) other = t; }
      else if (!done++) first_done = t;
    }
    if (!waiting) return 0;
    char a[48], b[48];
    if (done) {
      thread_text(a, sizeof a, first_wait); thread_text(b, sizeof b, first_done);
      snprintf(err, errlen, "__syncthreads() at line %u of the kernel source is reached by %u of the %u "
               "threads of block (%u,%u,%u): thread %s waits there, thread %s returned without reaching it",
               g.line[first_wait], waiting, g.n, blockIdx.x, blockIdx.y, blockIdx.z, a, b);
      return -1;
    }
    if (other != g.n) {
      thread_text(a, sizeof a, first_wait); thread_text(b, sizeof b, other);
      snprintf(err, errlen, "the threads of block (%u,%u,%u) wait at different __syncthreads(): thread %s "
               "at line %u, thread %s at line %u", blockIdx.x, blockIdx.y, blockIdx.z, a, g.line[first_wait],
               b, g.line[other]);
      return -1;
    }
    for (unsigned int t = 0; t < g.n; t++) g.state[t] = READY;
  }
}
/* the whole grid; dims: grid x, y, z then block x, y, z. flags: 1 reversed order, 2 fibers */
static int run(void (*body)(void*), void* ctx, const unsigned int* dims, int flags, char* err, unsigned long errlen) {
  gridDim = dim3{dims[0], dims[1], dims[2]}; blockDim = dim3{dims[3], dims[4], dims[5]};
  unsigned long blocks = (unsigned long)dims[0] * dims[1] * dims[2];
  unsigned int n = dims[3] * dims[4] * dims[5];
  if (n == 0 || n > 1024) { snprintf(err, errlen, "a block of %u threads (CUDA allows 1 to 1024)", n); return -1; }
  bool reverse = flags & 1, fibers = flags & 2;
  Grid* g = (Grid*)malloc(sizeof(Grid));
  const unsigned long stack_size = 1ul << 16;
  char* stacks = fibers ? (char*)malloc(stack_size * n) : 0;
  g->body = body; g->ctx = ctx; g->n = n;
  for (unsigned int i = 0; i < n; i++) g->order[i] = reverse ? n - 1 - i : i;
  int rc = 0;
  for (unsigned long k = 0; k < blocks && rc == 0; k++) {
    unsigned long b = reverse ? blocks - 1 - k : k;
    blockIdx.x = (unsigned int)(b % dims[0]); blockIdx.y = (unsigned int)(b / dims[0] % dims[1]);
    blockIdx.z = (unsigned int)(b / ((unsigned long)dims[0] * dims[1]));
    if (fibers) { grid = g; rc = run_fibers(*g, stacks, stack_size, err, errlen); grid = 0; continue; }
    for (unsigned int i = 0; i < n; i++) { set_thread(*g, g->order[i]); body(ctx); }
  }
  free(stacks); free(g);
  return rc;
}
template <int...> struct seq {};
template <int N, int... I> struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <int... I> struct make_seq<0, I...> { typedef seq<I...> type; };
template <typename... A> struct Call { void (*kernel)(A...); void** args; };
template <typename... A, int... I> static void invoke(Call<A...>* c, seq<I...>) { c->kernel(*static_cast<A*>(c->args[I])...); }
template <typename... A> static void body(void* p) { invoke((Call<A...>*)p, typename make_seq<sizeof...(A)>::type()); }
/* args: one pointer per kernel parameter, to its value (cuLaunchKernel's convention) */
template <typename... A> static int launch(void (*kernel)(A...), void** args, const unsigned int* dims, int flags,
                                           char* err, unsigned long errlen) {
  Call<A...> c{kernel, args};
  return run(&body<A...>, &c, dims, flags, err, errlen);
}
}
