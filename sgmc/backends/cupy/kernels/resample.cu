// Particle resampling: ancestors from cumulative offspring counts, one thread per particle.
//
// Every scheme of sgmc.ssm.resampling is defined by cumulative offspring counts C_i (particles
// 0..i have C_i offspring in total, C_{N-1} = N): slot k descends from the first particle i with
// C_i > k. Here thread (row, i) computes C_{i-1} and C_i itself and writes i into the slots
// [C_{i-1}, C_i): the writes of a warp are contiguous, no search over slots is needed, and a row of
// the systematic or stratified scheme costs one read of the cumulative weights and one write of
// the ancestors. The counts are computed with the same floating-point operations, in the same
// order, as the array-API twins (this file is compiled without fused multiply-adds), so the
// integers are the twins' exactly. Indices are 64-bit; all arithmetic is in double.
//
// Inputs: cum (batch, n) is the running sum of the weights in float64 (the twins' cumulative_sum);
// the scaled cumulative weight is v_i = cum_i * (n / cum_{n-1}) for i < n - 1 and exactly n for the
// last particle.

__device__ __forceinline__ double scaled_cdf(const double* cum, long long i, long long n, double scale) {
    return (i == n - 1) ? (double)n : cum[i] * scale;
}

__device__ __forceinline__ long long clip_count(long long c, long long n) {
    return c < 0 ? 0 : (c > n ? n : c);
}

// systematic: C_i = min(max(floor(v_i + u), 0), n)
__device__ __forceinline__ long long systematic_count(const double* cum, long long i, long long n, double scale,
                                                      double u) {
    return clip_count((long long)floor(scaled_cdf(cum, i, n, scale) + u), n);
}

// stratified: m = clip(floor(v_i), 0, n); C_i = m + [m < n and u_m < v_i - m]
__device__ __forceinline__ long long stratified_count(const double* cum, const double* u, long long i, long long n,
                                                      double scale) {
    const double v = scaled_cdf(cum, i, n, scale);
    double m = floor(v);
    m = m < 0.0 ? 0.0 : (m > (double)n ? (double)n : m);
    const long long mi = (long long)m;
    const long long at = mi < 0 ? 0 : (mi > n - 1 ? n - 1 : mi);
    const bool extra = (u[at] < v - m) && (mi < n);
    return mi + (extra ? 1 : 0);
}

// #{k : s_k + off < c + off} for a sorted row s (the twins search rows shifted by off = 3 * row)
__device__ __forceinline__ long long count_below(const double* s, double c, double off, long long n) {
    const double key = c + off;
    long long lo = 0, hi = n;
    while (lo < hi) {
        const long long mid = lo + (hi - lo) / 2;
        if (s[mid] + off < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Particle i fills slots [lo, hi); the last particle also fills [C_{n-1}, n) with n, which is what
// the twins' search returns for slots no particle claims (it cannot happen for systematic and
// stratified counts, which end at n; for the other schemes only when the largest order statistic
// rounds to 1).
__device__ __forceinline__ void write_range(long long* out, long long lo, long long hi, long long i, long long n) {
    for (long long k = lo; k < hi; ++k) out[k] = i;
    if (i == n - 1) {
        for (long long k = hi; k < n; ++k) out[k] = n;
    }
}

extern "C" __global__ void resample_systematic(const double* __restrict__ cum, const double* __restrict__ u,
                                               long long* __restrict__ out, long long batch, long long n) {
    const long long tid = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    if (tid >= batch * n) return;
    const long long row = tid / n;
    const long long i = tid - row * n;
    const double* c = cum + row * n;
    const double scale = (double)n / c[n - 1];
    const double ur = u[row];
    const long long lo = (i == 0) ? 0 : systematic_count(c, i - 1, n, scale, ur);
    const long long hi = systematic_count(c, i, n, scale, ur);
    write_range(out + row * n, lo, hi, i, n);
}

extern "C" __global__ void resample_stratified(const double* __restrict__ cum, const double* __restrict__ u,
                                               long long* __restrict__ out, long long batch, long long n) {
    const long long tid = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    if (tid >= batch * n) return;
    const long long row = tid / n;
    const long long i = tid - row * n;
    const double* c = cum + row * n;
    const double* ur = u + row * n;
    const double scale = (double)n / c[n - 1];
    const long long lo = (i == 0) ? 0 : stratified_count(c, ur, i - 1, n, scale);
    const long long hi = stratified_count(c, ur, i, n, scale);
    write_range(out + row * n, lo, hi, i, n);
}

// Multinomial and residual: C_i = base_i + #{k : s_k < cdf01_i} with s (batch, n) sorted uniforms
// (order statistics; entries past a row's draws are 2) and cdf01 (batch, n) in [0, 1]. base is
// null for multinomial and the deterministic counts for residual.
extern "C" __global__ void resample_sorted(const double* __restrict__ cdf01, const double* __restrict__ s,
                                           const long long* __restrict__ base, long long* __restrict__ out,
                                           long long batch, long long n) {
    const long long tid = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    if (tid >= batch * n) return;
    const long long row = tid / n;
    const long long i = tid - row * n;
    const double* c = cdf01 + row * n;
    const double* sr = s + row * n;
    const double off = (double)row * 3.0;
    long long lo = 0;
    if (i > 0) {
        lo = count_below(sr, c[i - 1], off, n);
        if (base != nullptr) lo += base[tid - 1];
    }
    long long hi = count_below(sr, c[i], off, n);
    if (base != nullptr) hi += base[tid];
    write_range(out + row * n, lo, hi, i, n);
}
