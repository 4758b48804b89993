// Minibatch indices without replacement: the first `size` distinct values of each row of draws.
//
// The array-API twin (sgmc._sampling.first_distinct) draws m i.i.d. integers per row and keeps the
// first `size` distinct ones in draw order. Here one block owns a row: in tiles of SGMC_BLOCK draws,
// each thread asks whether its draw repeats an earlier one of the row (a scan of the earlier draws,
// which are few: m is `size` plus a small margin), the block ranks the survivors with a prefix sum
// in shared memory, and the survivors ranked 1..size are written in draw order. The row reports
// whether it found `size` distinct values (short rows are drawn again by the host, as in the twin).

#ifndef SGMC_BLOCK
#define SGMC_BLOCK 128
#endif

extern "C" __global__ void subsample_first_distinct(const long long* __restrict__ draws, long long* __restrict__ out,
                                                    int* __restrict__ ok, long long m, long long size) {
    const int BS = SGMC_BLOCK;
    __shared__ int rank[SGMC_BLOCK];
    __shared__ long long kept;
    const long long row = blockIdx.x;
    const long long* d = draws + row * m;
    const int t = threadIdx.x;
    if (t == 0) kept = 0;
    __syncthreads();
    for (long long j0 = 0; j0 < m; j0 += BS) {
        if (kept >= size) break;  // uniform: read by every thread after the barrier below
        const long long j = j0 + t;
        int keep = 0;
        long long v = 0;
        if (j < m) {
            v = d[j];
            keep = 1;
            for (long long k = 0; k < j; ++k) {
                if (d[k] == v) {
                    keep = 0;
                    break;
                }
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
    if (t == 0) ok[row] = kept >= size ? 1 : 0;
}
