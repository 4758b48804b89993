// Minibatch gradient of a generalised linear model's log-likelihood, gathered and reduced in one pass.
//
// For chain c with minibatch indices idx[c, :] and weights w[c, :] (or none), the result is
//   g_c = sum_b w_cb r(eta_cb, y_{idx_cb}) x_{idx_cb},   eta_cb = x_{idx_cb} . theta_c,
// with r = d log f / d eta: y - sigmoid(eta) for logistic regression (kind 0) and
// (y - eta) / noise_var for linear regression (kind 1, param = noise_var). One block per chain
// walks its minibatch in tiles of SGMC_BLOCK data: each thread gathers one row and forms its r in
// the model's dtype (as the array-API twin does), then the threads switch roles, one per
// coordinate, and add the tile's r_b x_b into double accumulators in a fixed order (coalesced row
// reads, no atomics, the same sum on every run). The gathered rows are never written out.

#ifndef SGMC_BLOCK
#define SGMC_BLOCK 128
#endif

template <typename T>
__device__ void glm_grad(const T* __restrict__ X, const T* __restrict__ y, const T* __restrict__ theta,
                         const long long* __restrict__ idx, const T* __restrict__ w, double* __restrict__ out,
                         long long batch, long long dim, int kind, T param) {
    const int BS = SGMC_BLOCK;
    __shared__ T r_tile[SGMC_BLOCK];
    __shared__ long long row_tile[SGMC_BLOCK];
    const long long c = blockIdx.x;
    const T* th = theta + c * dim;
    for (long long m = threadIdx.x; m < dim; m += BS) out[c * dim + m] = 0.0;
    for (long long b0 = 0; b0 < batch; b0 += BS) {
        const long long b = b0 + threadIdx.x;
        __syncthreads();  // the previous tile has been consumed
        if (b < batch) {
            const long long row = idx[c * batch + b];
            const T* xr = X + row * dim;
            T eta = 0;
            for (long long m = 0; m < dim; ++m) eta += xr[m] * th[m];
            T r;
            if (kind == 0) {
                // one exp: e = exp(-|eta|) gives the sigmoid on both sides without overflow
                const T e = exp(-fabs(eta));
                const T inv = (T)1 / ((T)1 + e);
                const T sig = eta >= (T)0 ? inv : e * inv;
                r = y[row] - sig;
            } else {
                r = (y[row] - eta) / param;
            }
            if (w != nullptr) r = r * w[c * batch + b];
            r_tile[threadIdx.x] = r;
            row_tile[threadIdx.x] = row;
        }
        __syncthreads();
        const long long cnt = (batch - b0) < BS ? (batch - b0) : BS;
        for (long long m = threadIdx.x; m < dim; m += BS) {
            double a = out[c * dim + m];
            for (long long t = 0; t < cnt; ++t) a += (double)r_tile[t] * (double)X[row_tile[t] * dim + m];
            out[c * dim + m] = a;
        }
    }
}

extern "C" __global__ void glm_grad_f64(const double* X, const double* y, const double* theta, const long long* idx,
                                        const double* w, double* out, long long batch, long long dim, int kind,
                                        double param) {
    glm_grad<double>(X, y, theta, idx, w, out, batch, dim, kind, param);
}
extern "C" __global__ void glm_grad_f32(const float* X, const float* y, const float* theta, const long long* idx,
                                        const float* w, double* out, long long batch, long long dim, int kind,
                                        float param) {
    glm_grad<float>(X, y, theta, idx, w, out, batch, dim, kind, param);
}
