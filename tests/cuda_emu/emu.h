// Runs CUDA kernel source on the CPU, unchanged, for tests on machines without a GPU.
//
// A launch of `grid` blocks of `block` threads runs `block` POSIX threads; each one plays the same
// thread index in every block, block after block, and all of them meet at a barrier between blocks.
// __syncthreads() is that barrier, so a kernel that forgets one reads stale or half-written shared
// memory here as it would on a GPU. __shared__ arrays are function statics: one copy, used by the
// one block that runs at a time. Only one-dimensional grids and blocks are emulated, which is all
// the kernels of sgmc use. Warp intrinsics and atomics are deliberately absent: the kernels are
// written without them (deterministic block reductions through shared memory). The math functions
// are the compiler's builtins (IEEE sqrt; exp, log and pow from libm), overloaded for float and
// double as CUDA overloads them; only pthread.h is included, so a kernel file builds in a second.
#pragma once
#include <pthread.h>

struct dim3 {
    unsigned x, y, z;
};

inline thread_local dim3 threadIdx{0, 0, 0};
inline thread_local dim3 blockIdx{0, 0, 0};
inline dim3 blockDim{1, 1, 1};
inline dim3 gridDim{1, 1, 1};

namespace sgmc_emu {
inline pthread_barrier_t block_barrier;

template <class F>
struct Task {
    F* body;
    unsigned thread;
    unsigned grid;
};

template <class F>
void* run_thread(void* arg) {
    Task<F>* task = static_cast<Task<F>*>(arg);
    threadIdx = dim3{task->thread, 0, 0};
    for (unsigned g = 0; g < task->grid; ++g) {
        blockIdx = dim3{g, 0, 0};
        (*task->body)();
        pthread_barrier_wait(&block_barrier);  // the block is finished before the next one starts
    }
    return nullptr;
}

template <class F>
void launch(unsigned grid, unsigned block, F body) {
    gridDim = dim3{grid, 1, 1};
    blockDim = dim3{block, 1, 1};
    pthread_barrier_init(&block_barrier, nullptr, block);
    pthread_t* threads = new pthread_t[block];
    Task<F>* tasks = new Task<F>[block];
    for (unsigned t = 0; t < block; ++t) {
        tasks[t] = Task<F>{&body, t, grid};
        pthread_create(&threads[t], nullptr, run_thread<F>, &tasks[t]);
    }
    for (unsigned t = 0; t < block; ++t) pthread_join(threads[t], nullptr);
    pthread_barrier_destroy(&block_barrier);
    delete[] tasks;
    delete[] threads;
}
}  // namespace sgmc_emu

inline void __syncthreads() { pthread_barrier_wait(&sgmc_emu::block_barrier); }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static

inline double sqrt(double x) { return __builtin_sqrt(x); }
inline float sqrt(float x) { return __builtin_sqrtf(x); }
inline double exp(double x) { return __builtin_exp(x); }
inline float exp(float x) { return __builtin_expf(x); }
inline double log(double x) { return __builtin_log(x); }
inline float log(float x) { return __builtin_logf(x); }
inline double pow(double x, double y) { return __builtin_pow(x, y); }
inline float pow(float x, float y) { return __builtin_powf(x, y); }
inline double fabs(double x) { return __builtin_fabs(x); }
inline float fabs(float x) { return __builtin_fabsf(x); }
inline double floor(double x) { return __builtin_floor(x); }
inline float floor(float x) { return __builtin_floorf(x); }
inline double ceil(double x) { return __builtin_ceil(x); }
inline float ceil(float x) { return __builtin_ceilf(x); }
