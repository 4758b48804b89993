// Minibatch gradient of a generalised linear model's log-likelihood, gathered and reduced in one pass.
//
// For chain c with minibatch indices idx[c, :] and weights w[c, :] (or none), the result is
//   g_c = sum_b w_cb r(eta_cb, y_{idx_cb}) x_{idx_cb},   eta_cb = x_{idx_cb} . theta_c,
// with r = d log f / d eta: y - sigmoid(eta) for logistic regression (kind 0) and
// (y - eta) / noise_var for linear regression (kind 1, param = noise_var). With a second point
// (centre, not null) the kernel returns the control-variate difference
//   sum_b w_cb (r(eta_cb, 0) - r(eta0_cb, 0)) x_{idx_cb},   eta0_cb = x_{idx_cb} . centre_c,
// where y cancels (a GLM residual is (y - mean(eta)) / dispersion): both residuals are formed and
// subtracted in the model's dtype before anything is rounded to it again, from one gather of the row.
//
// Launch: `splits` blocks per chain (block = chain * splits + part), each taking one contiguous part
// of the minibatch, so that a few chains still spread over the GPU. A block walks its part in tiles
// of SGMC_BLOCK data: each thread gathers one row and forms its r in the model's dtype (as the
// array-API twin does); then the threads switch roles: thread q owns coordinate q % dim of group
// q / dim (BS / dim groups when dim <= BS, every coordinate in turn otherwise) and adds r_b x_b of
// the tile's data b = group, group + groups, ... into a double accumulator. The groups are summed in
// a fixed order, one row of `part` (chains * splits, dim) per block; the host sums the parts in a
// fixed order, so the result is the same on every run. No atomics; null pointers are NULL.

#ifndef SGMC_BLOCK
#define SGMC_BLOCK 128
#endif

template <typename T>
__device__ __forceinline__ T glm_residual(T eta, T yv, int kind, T param) {
    if (kind == 0) {
        // one exp: e = exp(-|eta|) gives the sigmoid on both sides without overflow
        const T e = exp(-fabs(eta));
        const T inv = (T)1 / ((T)1 + e);
        const T sig = eta >= (T)0 ? inv : e * inv;
        return yv - sig;
    }
    return (yv - eta) / param;
}

template <typename T>
__device__ void glm_grad(const T* __restrict__ X, const T* __restrict__ y, const T* __restrict__ theta,
                         const T* __restrict__ centre, const long long* __restrict__ idx, const T* __restrict__ w,
                         double* __restrict__ part, long long batch, long long dim, long long splits, int kind,
                         T param) {
    const int BS = SGMC_BLOCK;
    __shared__ T r_tile[SGMC_BLOCK];
    __shared__ long long row_tile[SGMC_BLOCK];
    __shared__ double red[SGMC_BLOCK];
    const long long blk = blockIdx.x;
    const long long c = blk / splits;
    const long long p = blk - c * splits;
    const long long per = (batch + splits - 1) / splits;
    const long long start = p * per;
    const long long stop = (start + per) < batch ? (start + per) : batch;
    const T* th = theta + c * dim;
    const T* th0 = centre != nullptr ? centre + c * dim : nullptr;
    const long long groups = dim <= BS ? BS / dim : 1;
    const long long items = groups * dim;  // (group, coordinate) pairs
    double* out = part + blk * dim;
    double acc = 0.0;  // the one item of this thread when items <= BS
    if (items > BS) {
        for (long long m = threadIdx.x; m < dim; m += BS) out[m] = 0.0;
    }
    for (long long b0 = start; b0 < stop; b0 += BS) {
        const long long b = b0 + threadIdx.x;
        __syncthreads();  // the previous tile has been consumed
        if (b < stop) {
            const long long row = idx[c * batch + b];
            const T* xr = X + row * dim;
            T r;
            if (th0 == nullptr) {
                T eta = 0;
                for (long long m = 0; m < dim; ++m) eta += xr[m] * th[m];
                r = glm_residual(eta, y[row], kind, param);
            } else {
                T eta = 0, eta0 = 0;
                for (long long m = 0; m < dim; ++m) {
                    eta += xr[m] * th[m];
                    eta0 += xr[m] * th0[m];
                }
                r = glm_residual(eta, (T)0, kind, param) - glm_residual(eta0, (T)0, kind, param);
            }
            if (w != nullptr) r = r * w[c * batch + b];
            r_tile[threadIdx.x] = r;
            row_tile[threadIdx.x] = row;
        }
        __syncthreads();
        const long long cnt = (stop - b0) < BS ? (stop - b0) : BS;
        for (long long q = threadIdx.x; q < items; q += BS) {
            const long long g = q / dim;
            const long long m = q - g * dim;
            double a = items <= BS ? acc : out[m];
            for (long long t = g; t < cnt; t += groups) a += (double)r_tile[t] * (double)X[row_tile[t] * dim + m];
            if (items <= BS) acc = a; else out[m] = a;
        }
    }
    if (items <= BS) {
        __syncthreads();
        red[threadIdx.x] = (long long)threadIdx.x < items ? acc : 0.0;
        __syncthreads();
        for (long long m = threadIdx.x; m < dim; m += BS) {
            double s = 0.0;
            for (long long g = 0; g < groups; ++g) s += red[g * dim + m];
            out[m] = s;
        }
    }
}

extern "C" __global__ void glm_grad_f64(const double* X, const double* y, const double* theta, const double* centre,
                                        const long long* idx, const double* w, double* part, long long batch,
                                        long long dim, long long splits, int kind, double param) {
    glm_grad<double>(X, y, theta, centre, idx, w, part, batch, dim, splits, kind, param);
}
extern "C" __global__ void glm_grad_f32(const float* X, const float* y, const float* theta, const float* centre,
                                        const long long* idx, const float* w, double* part, long long batch,
                                        long long dim, long long splits, int kind, float param) {
    glm_grad<float>(X, y, theta, centre, idx, w, part, batch, dim, splits, kind, param);
}
