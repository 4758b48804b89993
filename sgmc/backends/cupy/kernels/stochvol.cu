// One step of the bootstrap particle filter for the stochastic volatility model, fused.
//
// Model (Aicher thesis, Eq. 3.88): x_t = phi x_{t-1} + |sigma| eps_t, y_t | x_t ~ N(0, tau^2 exp(x_t)),
// with the formulas of sgmc.ssm.stochvol.SVKernel (sigma and tau may carry a sign).
// For each of `batch` independent filters (row b: its own phi, sigma, tau and observation y_b) and
// its N particles, with pre-drawn standard normals eps, one block per row
//   propagates  x_i = phi x_prev_i + |sigma| eps_i,
//   weights     l_i = -(log(2 pi) + log tau^2) / 2 - x_i / 2 - y^2 (1 / (2 tau^2)) exp(-x_i)   (incremental),
//   normalises  a_i = log W_prev_i + l_i (log W_prev_i = -log N when no previous weights are given),
//               W_i = exp(a_i - max a) / sum_j exp(a_j - max a),
//   and returns the log-likelihood increment log sum_i W_prev_i exp(l_i) = max a + log sum exp(a - max a).
// The particles, the incremental log-weights and the normalised weights are written once; a_i is
// kept in the output W between the two passes. Maximum and sum are reduced through shared memory in
// a fixed order (the sum in double), so results do not change between runs. w_prev may be null
// (passed as the integer 0, never as None); no other pointer may be.

#ifndef SGMC_BLOCK
#define SGMC_BLOCK 256
#endif

template <typename T>
__device__ void sv_step(const T* __restrict__ x_prev, const T* __restrict__ eps, const T* __restrict__ w_prev,
                        const T* __restrict__ y, const T* __restrict__ phi, const T* __restrict__ sigma,
                        const T* __restrict__ tau, T* __restrict__ x, T* __restrict__ logw, T* __restrict__ w,
                        double* __restrict__ loglik, long long n) {
    const int BS = SGMC_BLOCK;
    __shared__ T red_max[SGMC_BLOCK];
    __shared__ double red_sum[SGMC_BLOCK];
    const long long row = blockIdx.x;
    const long long base = row * n;
    const T ph = phi[row], sd = fabs(sigma[row]), ta = tau[row], yb = y[row];
    const T r = ta * ta;
    const T c0 = (T)(-0.5) * ((T)1.8378770664093454836 + log(r));  // -(log 2 pi + log tau^2) / 2
    const T y2 = yb * yb;
    const T inv_2r = (T)0.5 / r;
    const T log_n = log((T)n);
    T m = 0;
    for (long long i = threadIdx.x; i < n; i += BS) {
        const T xi = ph * x_prev[base + i] + sd * eps[base + i];
        const T li = c0 - (T)0.5 * xi - y2 * inv_2r * exp(-xi);
        const T ai = (w_prev != nullptr) ? log(w_prev[base + i]) + li : li - log_n;
        x[base + i] = xi;
        logw[base + i] = li;
        w[base + i] = ai;
        m = (i == (long long)threadIdx.x || ai > m) ? ai : m;
    }
    __syncthreads();
    if ((long long)threadIdx.x >= n) m = w[base];  // threads without particles: any member of the row
    red_max[threadIdx.x] = m;
    __syncthreads();
    for (int h = BS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) {
            const T o = red_max[threadIdx.x + h];
            if (o > red_max[threadIdx.x]) red_max[threadIdx.x] = o;
        }
        __syncthreads();
    }
    const T top = red_max[0];
    double s = 0.0;
    for (long long i = threadIdx.x; i < n; i += BS) {
        const T e = exp(w[base + i] - top);
        w[base + i] = e;
        s += (double)e;
    }
    red_sum[threadIdx.x] = s;
    __syncthreads();
    for (int h = BS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) red_sum[threadIdx.x] += red_sum[threadIdx.x + h];
        __syncthreads();
    }
    const double total = red_sum[0];
    for (long long i = threadIdx.x; i < n; i += BS) w[base + i] = (T)((double)w[base + i] / total);
    if (threadIdx.x == 0) loglik[row] = (double)top + log(total);
}

extern "C" __global__ void stochvol_step_f64(const double* x_prev, const double* eps, const double* w_prev,
                                             const double* y, const double* phi, const double* sigma,
                                             const double* tau, double* x, double* logw, double* w, double* loglik,
                                             long long n) {
    sv_step<double>(x_prev, eps, w_prev, y, phi, sigma, tau, x, logw, w, loglik, n);
}
extern "C" __global__ void stochvol_step_f32(const float* x_prev, const float* eps, const float* w_prev,
                                             const float* y, const float* phi, const float* sigma,
                                             const float* tau, float* x, float* logw, float* w, double* loglik,
                                             long long n) {
    sv_step<float>(x_prev, eps, w_prev, y, phi, sigma, tau, x, logw, w, loglik, n);
}
