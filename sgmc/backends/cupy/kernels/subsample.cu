// Minibatch indices without replacement: the first `size` distinct values of each row of draws.
//
// The array-API twin (sgmc._sampling.subsample_twin) draws m i.i.d. integers per row and keeps the
// first `size` distinct ones in draw order; a row with fewer distinct values continues its own
// sequence past the m draws with the counter-based stream of sgmc._draw_continuation (keyed by the
// row's draws), never with the generator, so the host never needs to know whether a row fell short.
// Here one block owns a row: in tiles of SGMC_BLOCK draws, each thread asks whether its draw repeats
// an earlier one of the row (a scan of the earlier draws, which are few: m is `size` plus a small
// margin; the host sends large subsets to the twin), the block ranks the survivors with a prefix sum
// in shared memory, and the survivors ranked 1..size are written in draw order. Past the m draws
// the values come from the stream (an almost never taken path). 64-bit arithmetic wraps, unsigned,
// bit for bit as the twin's signed int64 with logical shifts.

#ifndef SGMC_BLOCK
#define SGMC_BLOCK 128
#endif

#define SGMC_GOLDEN 0x9E3779B97F4A7C15ull

__device__ __forceinline__ unsigned long long sgmc_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// draw j of the row: one of its m draws, or the continuation keyed by `key`
__device__ __forceinline__ long long sgmc_draw(const long long* d, long long j, long long m, unsigned long long key,
                                               long long n_data) {
    if (j < m) return d[j];
    const unsigned long long z = sgmc_mix(key + (unsigned long long)(j + 1) * SGMC_GOLDEN) >> 1;
    return (long long)(z % (unsigned long long)n_data);
}

extern "C" __global__ void subsample_first_distinct(const long long* __restrict__ draws, long long* __restrict__ out,
                                                    long long m, long long size, long long n_data) {
    const int BS = SGMC_BLOCK;
    __shared__ int rank[SGMC_BLOCK];
    __shared__ unsigned long long part[SGMC_BLOCK];
    __shared__ long long kept;
    const long long row = blockIdx.x;
    const long long* d = draws + row * m;
    const int t = threadIdx.x;
    if (t == 0) kept = 0;
    // the row's key: a wrapping sum, so the order of the partial sums does not matter
    unsigned long long acc = 0;
    for (long long j = t; j < m; j += BS) acc += sgmc_mix((unsigned long long)d[j] + (unsigned long long)(j + 1) * SGMC_GOLDEN);
    part[t] = acc;
    __syncthreads();
    unsigned long long key = 0;
    for (int i = 0; i < BS; ++i) key += part[i];
    key = sgmc_mix(key);
    for (long long j0 = 0;; j0 += BS) {
        if (kept >= size) break;  // uniform: read by every thread after the barrier below
        const long long j = j0 + t;
        const long long v = sgmc_draw(d, j, m, key, n_data);
        int keep = 1;
        for (long long k = 0; k < j; ++k) {
            if (sgmc_draw(d, k, m, key, n_data) == v) {
                keep = 0;
                break;
            }
        }
        rank[t] = keep;
        __syncthreads();
        for (int off = 1; off < BS; off *= 2) {  // inclusive prefix sum of the survivors
            const int add = t >= off ? rank[t - off] : 0;
            __syncthreads();
            rank[t] += add;
            __syncthreads();
        }
        const long long r = kept + rank[t];  // 1-based rank of a survivor
        if (keep && r <= size) out[row * size + (r - 1)] = v;
        __syncthreads();
        if (t == BS - 1) kept += rank[BS - 1];
        __syncthreads();
    }
}
