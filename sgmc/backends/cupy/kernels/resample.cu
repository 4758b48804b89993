// Particle resampling: ancestors from cumulative offspring counts, one thread per offspring slot.
//
// Every scheme of sgmc.ssm.resampling is defined by cumulative offspring counts C_i (particles
// 0..i have C_i offspring in total, C_{N-1} = N): slot k descends from the first particle i with
// C_i > k, or is given N when no particle claims it (what the twins' search returns). Here thread
// (row, k) finds that particle by a binary search over i, computing each C_i it visits from the
// running sums of the weights: the ancestors are written once, one store per thread, coalesced,
// however unequal the weights (a particle with all the mass costs no more than uniform weights).
// The counts are computed with the same floating-point operations, in the same order, as the
// array-API twins (this file is compiled without fused multiply-adds), so the integers are the
// twins' exactly. Indices are 64-bit; all arithmetic is in double. No pointer may be null.
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

// The first i in [0, n) with count(i) > k, or n: the twins' searchsorted(counts, k, side="right").
template <typename Count>
__device__ __forceinline__ long long first_above(long long k, long long n, Count count) {
    long long lo = 0, hi = n;
    while (lo < hi) {
        const long long mid = lo + (hi - lo) / 2;
        if (count(mid) > k) hi = mid; else lo = mid + 1;
    }
    return lo;
}

#define SGMC_SLOT                                                                                  \
    const long long tid = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;  \
    if (tid >= batch * n) return;                                                                  \
    const long long row = tid / n;                                                                 \
    const long long k = tid - row * n;

extern "C" __global__ void resample_systematic(const double* __restrict__ cum, const double* __restrict__ u,
                                               long long* __restrict__ out, long long batch, long long n) {
    SGMC_SLOT
    const double* c = cum + row * n;
    const double scale = (double)n / c[n - 1];
    const double ur = u[row];
    out[tid] = first_above(k, n, [&](long long i) { return systematic_count(c, i, n, scale, ur); });
}

extern "C" __global__ void resample_stratified(const double* __restrict__ cum, const double* __restrict__ u,
                                               long long* __restrict__ out, long long batch, long long n) {
    SGMC_SLOT
    const double* c = cum + row * n;
    const double* ur = u + row * n;
    const double scale = (double)n / c[n - 1];
    out[tid] = first_above(k, n, [&](long long i) { return stratified_count(c, ur, i, n, scale); });
}

// Multinomial: C_i = #{k : s_k < cdf01_i} with s (batch, n) the sorted uniforms of the row (order
// statistics) and cdf01 (batch, n) in [0, 1]. For a sorted s, C_i > k exactly when s_k < cdf01_i, so
// slot k's ancestor is the first i with s_k + off < cdf01_i + off: one binary search.
extern "C" __global__ void resample_multinomial(const double* __restrict__ cdf01, const double* __restrict__ s,
                                                long long* __restrict__ out, long long batch, long long n) {
    SGMC_SLOT
    const double* c = cdf01 + row * n;
    const double off = (double)row * 3.0;
    const double key = s[row * n + k] + off;
    out[tid] = first_above(0, n, [&](long long i) { return (long long)(key < c[i] + off); });
}

// Residual: C_i = base_i + #{k : s_k < cdf01_i}, base the deterministic counts and s the sorted
// uniforms of the row's remaining draws (entries past them are 2, above every cdf01): a binary search
// over particles whose every step counts the uniforms below cdf01_i by a second binary search.
extern "C" __global__ void resample_residual(const double* __restrict__ cdf01, const double* __restrict__ s,
                                             const long long* __restrict__ base, long long* __restrict__ out,
                                             long long batch, long long n) {
    SGMC_SLOT
    const double* c = cdf01 + row * n;
    const double* sr = s + row * n;
    const long long* br = base + row * n;
    const double off = (double)row * 3.0;
    out[tid] = first_above(k, n, [&](long long i) { return br[i] + count_below(sr, c[i], off, n); });
}
