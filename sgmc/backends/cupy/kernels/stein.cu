// Pair sums of the IMQ Langevin Stein kernel (kernelised Stein discrepancy).
//
// For rows x_i (centred samples), u_i = A x_i (A = Lambda^{-1}, symmetric) and scores s_i, with
// r = x_i - x_j, v = u_i - u_j = A r and B = c^2 + r . v, the pair kernel is
//   k0(i, j) = B^beta s_i . s_j + 2 beta B^(beta-1) [(s_j - s_i) . v - tr A]
//              - 4 beta (beta - 1) B^(beta-2) |v|^2                        (kind "joint"),
// or the same per coordinate m with s_im s_jm, (s_jm - s_im) v_m - A_mm and v_m^2 (kind "sum").
// Every block owns SGMC_BLOCK consecutive rows, one per thread, and walks the column tiles j <= i
// of the lower triangle, each tile staged once through shared memory and read by all threads. A
// thread returns its row's r_i = k0(i, i) + 2 sum_{j<i} k0(i, j), accumulated in double, and the
// block reduces its rows through shared memory in a fixed order into one partial sum per block, so
// the V-statistic sum_i r_i is the same on every run. Blocks start with the longest rows (the
// last row tile) so that the triangle's uneven work balances. Pair indices are 64-bit.
//
// The loops over coordinates run over the compile-time d and are unrolled, so a row's features stay
// in registers; the host caps d per kernel where they stop fitting (sgmc.backends.cupy._native,
// STEIN_MAX_DIM, checked by ptxas: no spills, no stack frame) and runs the twin above it. B^beta is
// exp(beta log B) (one exp and one log, inline; for beta = -1/2 one reciprocal square root), not pow.
//
// Compile-time sizes: SGMC_DIM (dimension d) and SGMC_BLOCK (threads per block, a power of two).

#ifndef SGMC_DIM
#error "compile with -DSGMC_DIM=<dimension>"
#endif
#ifndef SGMC_BLOCK
#define SGMC_BLOCK 128
#endif

template <typename T, bool SUM>
__device__ void stein_rows(const T* __restrict__ x, const T* __restrict__ u, const T* __restrict__ s,
                           const T* __restrict__ diag, double* __restrict__ rows, double* __restrict__ partial,
                           long long n, T c2, T beta, T tr, int half) {
    const int D = SGMC_DIM;
    const int BS = SGMC_BLOCK;
    const int ACC = SUM ? SGMC_DIM : 1;
    __shared__ T tx[SGMC_BLOCK * SGMC_DIM];
    __shared__ T tu[SGMC_BLOCK * SGMC_DIM];
    __shared__ T ts[SGMC_BLOCK * SGMC_DIM];
    __shared__ double red[SGMC_BLOCK];

    const long long tile = (long long)gridDim.x - 1 - (long long)blockIdx.x;  // longest rows first
    const long long i = tile * BS + (long long)threadIdx.x;
    const bool active = i < n;
    const T b2 = (T)2 * beta;
    const T b4 = (T)(-4) * beta * (beta - (T)1);

    T xi[SGMC_DIM], ui[SGMC_DIM], si[SGMC_DIM];
    double acc[SUM ? SGMC_DIM : 1];
#pragma unroll
    for (int m = 0; m < D; ++m) {
        xi[m] = active ? x[i * D + m] : (T)0;
        ui[m] = active ? u[i * D + m] : (T)0;
        si[m] = active ? s[i * D + m] : (T)0;
    }
#pragma unroll
    for (int m = 0; m < ACC; ++m) acc[m] = 0.0;

    for (long long jt = 0; jt <= tile; ++jt) {
        const long long j0 = jt * BS;
        __syncthreads();  // everyone is done with the previous tile
        for (long long e = threadIdx.x; e < (long long)BS * D; e += BS) {
            const long long g = j0 * D + e;  // coalesced: the tile is one contiguous run of rows
            const bool in = g < n * D;
            tx[e] = in ? x[g] : (T)0;
            tu[e] = in ? u[g] : (T)0;
            ts[e] = in ? s[g] : (T)0;
        }
        __syncthreads();
        if (active) {
            const long long last = i - j0 + 1;  // columns j0 .. i of this tile, at most BS
            const int cols = last < BS ? (int)last : BS;
            for (int t = 0; t < cols; ++t) {
                const T* cx = tx + t * D;
                const T* cu = tu + t * D;
                const T* cs = ts + t * D;
                const double weight = (j0 + t == i) ? 1.0 : 2.0;
                T v[SGMC_DIM];
                T b = c2;
#pragma unroll
                for (int m = 0; m < D; ++m) {
                    v[m] = ui[m] - cu[m];
                    b += (xi[m] - cx[m]) * v[m];
                }
                const T inv = (T)1 / b;
                const T w = half ? sqrt(inv) : exp(beta * log(b));
                const T w1 = w * inv;
                const T w2 = w1 * inv;
                if (SUM) {
#pragma unroll
                    for (int m = 0; m < D; ++m) {
                        // diag[m] is the same address for every thread: a broadcast from the cache
                        const T k = w * si[m] * cs[m] + b2 * w1 * ((cs[m] - si[m]) * v[m] - diag[m])
                                    + b4 * w2 * v[m] * v[m];
                        acc[m] += weight * (double)k;
                    }
                } else {
                    T ss = 0, e = 0, vv = 0;
#pragma unroll
                    for (int m = 0; m < D; ++m) {
                        ss += si[m] * cs[m];
                        e += (cs[m] - si[m]) * v[m];
                        vv += v[m] * v[m];
                    }
                    const T k = w * ss + b2 * w1 * (e - tr) + b4 * w2 * vv;
                    acc[0] += weight * (double)k;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < ACC; ++m) {
        if (active) rows[i * ACC + m] = acc[m];
        __syncthreads();  // red is free again
        red[threadIdx.x] = active ? acc[m] : 0.0;
        __syncthreads();
        for (int half_width = BS / 2; half_width > 0; half_width /= 2) {
            if ((int)threadIdx.x < half_width) red[threadIdx.x] += red[threadIdx.x + half_width];
            __syncthreads();
        }
        if (threadIdx.x == 0) partial[tile * ACC + m] = red[0];
    }
}

// The entry points are written out, not made by a macro: kernel_names() and the tests' CPU emulator read them.
extern "C" __global__ void stein_joint_f64(const double* x, const double* u, const double* s, const double* diag,
                                           double* rows, double* partial, long long n, double c2, double beta,
                                           double tr, int half) {
    stein_rows<double, false>(x, u, s, diag, rows, partial, n, c2, beta, tr, half);
}
extern "C" __global__ void stein_sum_f64(const double* x, const double* u, const double* s, const double* diag,
                                         double* rows, double* partial, long long n, double c2, double beta,
                                         double tr, int half) {
    stein_rows<double, true>(x, u, s, diag, rows, partial, n, c2, beta, tr, half);
}
extern "C" __global__ void stein_joint_f32(const float* x, const float* u, const float* s, const float* diag,
                                           double* rows, double* partial, long long n, float c2, float beta,
                                           float tr, int half) {
    stein_rows<float, false>(x, u, s, diag, rows, partial, n, c2, beta, tr, half);
}
extern "C" __global__ void stein_sum_f32(const float* x, const float* u, const float* s, const float* diag,
                                         double* rows, double* partial, long long n, float c2, float beta,
                                         float tr, int half) {
    stein_rows<float, true>(x, u, s, diag, rows, partial, n, c2, beta, tr, half);
}
