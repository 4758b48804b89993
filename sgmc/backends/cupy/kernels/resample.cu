// Particle resampling: ancestors from normalised cumulative weights and pre-drawn positions.
//
// Every scheme ends in the same question: for sorted positions p_0 <= ... <= p_{M-1} in [0, 1) and
// a row's cumulative weights c_0 <= ... <= c_{N-1}, the ancestor of position k is
// a_k = #{j : c_j <= p_k} (numpy.searchsorted(c, p, side="right")), and positions at or beyond c_{N-1}
// (rounding leaves c_{N-1} slightly below 1) go to the row's `last` index. Instead of one binary
// search per position, one thread per particle j finds the range of positions [lo_j, hi_j) that
// falls in [c_{j-1}, c_j) and writes j there: the writes are contiguous, and with the positions of
// systematic resampling, p_k = (k + u) / N, each bound takes O(1) work. Indices are 64-bit
// throughout, so rows of more than 2^31 particles and batches of many rows are safe.

// First k in [0, m) with (k + u) / n >= c, computed with the same floating-point expression the
// positions are defined by, so the answer is exact, not merely close.
template <typename T>
__device__ __forceinline__ long long systematic_lower_bound(T c, T u, long long n, long long m) {
    T guess = c * (T)n - u;
    long long k;
    if (!(guess > (T)0)) {
        k = 0;
    } else if (guess >= (T)m) {
        k = m;
    } else {
        k = (long long)ceil(guess);
    }
    while (k > 0 && ((T)(k - 1) + u) / (T)n >= c) --k;
    while (k < m && ((T)k + u) / (T)n < c) ++k;
    return k;
}

// First k in [0, m) with pos[k] >= c (pos sorted).
template <typename T>
__device__ __forceinline__ long long sorted_lower_bound(const T* pos, T c, long long m) {
    long long lo = 0, hi = m;
    while (lo < hi) {
        long long mid = lo + (hi - lo) / 2;
        if (pos[mid] < c) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// One thread per (row, particle j): write j into out[row, lo_j:hi_j]. Positions at or beyond
// c_{N-1} go to last[row] (written by the thread j = N - 1).
template <typename T, bool SYSTEMATIC>
__device__ void resample_ranges(const T* __restrict__ cdf, const T* __restrict__ pos,
                                const long long* __restrict__ last, long long* __restrict__ out,
                                long long batch, long long n, long long m) {
    long long tid = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    if (tid >= batch * n) return;
    long long row = tid / n;
    long long j = tid - row * n;
    const T* c = cdf + row * n;
    long long lo, hi;
    if (SYSTEMATIC) {
        T u = pos[row];
        lo = (j == 0) ? 0 : systematic_lower_bound<T>(c[j - 1], u, n, m);
        hi = systematic_lower_bound<T>(c[j], u, n, m);
    } else {
        const T* p = pos + row * m;
        lo = (j == 0) ? 0 : sorted_lower_bound<T>(p, c[j - 1], m);
        hi = sorted_lower_bound<T>(p, c[j], m);
    }
    long long* o = out + row * m;
    for (long long k = lo; k < hi; ++k) o[k] = j;
    if (j == n - 1) {
        long long tail = last[row];
        for (long long k = hi; k < m; ++k) o[k] = tail;
    }
}

// Systematic: positions (k + u[row]) / n for k < n (m == n).
extern "C" __global__ void resample_systematic_f64(const double* cdf, const double* u, const long long* last,
                                                   long long* out, long long batch, long long n) {
    resample_ranges<double, true>(cdf, u, last, out, batch, n, n);
}
extern "C" __global__ void resample_systematic_f32(const float* cdf, const float* u, const long long* last,
                                                   long long* out, long long batch, long long n) {
    resample_ranges<float, true>(cdf, u, last, out, batch, n, n);
}

// Any sorted positions (stratified, multinomial after sorting, the residual part): pos is (batch, m).
extern "C" __global__ void resample_sorted_f64(const double* cdf, const double* pos, const long long* last,
                                               long long* out, long long batch, long long n, long long m) {
    resample_ranges<double, false>(cdf, pos, last, out, batch, n, m);
}
extern "C" __global__ void resample_sorted_f32(const float* cdf, const float* pos, const long long* last,
                                               long long* out, long long batch, long long n, long long m) {
    resample_ranges<float, false>(cdf, pos, last, out, batch, n, m);
}

// Residual resampling, deterministic part: particle j is copied counts[row, j] times, into
// out[row, start[row, j] : start[row, j] + counts[row, j]] (start is the exclusive prefix sum of
// the counts within the row, out has row stride `stride`).
extern "C" __global__ void resample_expand(const long long* __restrict__ counts, const long long* __restrict__ start,
                                           long long* __restrict__ out, long long batch, long long n,
                                           long long stride) {
    long long tid = (long long)blockIdx.x * (long long)blockDim.x + (long long)threadIdx.x;
    if (tid >= batch * n) return;
    long long row = tid / n;
    long long j = tid - row * n;
    long long* o = out + row * stride + start[tid];
    long long c = counts[tid];
    for (long long k = 0; k < c; ++k) o[k] = j;
}
