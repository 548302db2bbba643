// Asynchronous global → shared copies (cp.async, NVIDIA sm_80+): what the tensor-core GEMMs
// (gemm_mma.cuh, sm90/gemm_wgmma.cu) fill their shared-memory stages with; the mbarriers that
// producer and consumer warps hand stages over with (mla.cu, sm90/gemm_tma.cuh); and sm_90's bulk
// copies, which fill such stages by the copy engine. Device code only, inside DING_GPU_NVIDIA_MMA
// (vendor.h); a HIP build never sees it.
#pragma once
#include <cstdint>

#include "vendor.h"

#if defined(DING_GPU_NVIDIA_MMA)
DING_GPU_BEGIN

__device__ inline uint32_t smem_address(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16 bytes global → shared, bypassing L1; src_bytes = 0 writes 16 zero bytes and reads nothing.
__device__ inline void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// An L2 eviction policy for copies of data read once per pass (a decode step's weights): as they
// stream through L2 they are the first lines evicted, so what the step reads again (the KV cache,
// activations, the kernels' code) stays resident. `evict_first` false: evict_normal, the priority
// the PTX ISA gives a copy without a hint.
__device__ inline uint64_t l2_stream_policy(bool evict_first) {
  uint64_t policy;
  if (evict_first)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  else
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// The same copy under an eviction policy (l2_stream_policy), asking L2 to fetch the whole
// `l2_fetch`-byte piece (128 or 256; 0: none) around src from memory: where neighbouring threads
// (or this thread's next copies) read the rest of it soon, fewer and larger DRAM requests.
// l2_fetch is uniform over the launch, so the branch costs no divergence.
__device__ inline void cp_async_16(uint32_t dst, const void* src, int src_bytes, int l2_fetch, uint64_t policy) {
  if (l2_fetch == 128)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::128B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes), "l"(policy)
                 : "memory");
  else if (l2_fetch == 256)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes), "l"(policy)
                 : "memory");
  else
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes), "l"(policy)
                 : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// The same for a count known only at run time (the instruction takes an immediate): n in
// [0, Max], larger n waits as for Max.
template <int Max>
__device__ inline void cp_async_wait_for(int n) {
  if constexpr (Max > 0) {
    if (n < Max) return cp_async_wait_for<Max - 1>(n);
  }
  cp_async_wait<Max>();
}

// ---- mbarriers (shared-memory addresses of 8-byte words) ------------------------------------------
// A phase completes once `arrivals` arrivals have come (and, under TMA, the expected bytes); a
// waiter names the phase by its parity, 0 for the first.
__device__ inline void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// An arrival with release semantics: what this thread did to shared memory before it is visible
// to whoever waits on the phase.
__device__ inline void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival made once every cp.async this thread has issued so far has landed (one of the
// arrivals the barrier was initialised with).
__device__ inline void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Until the phase of parity `parity` has completed (acquire: the writes its arrivals released,
// or the copies they tracked, are visible after). sm_90's try_wait suspends in hardware for a
// while before it says no; earlier chips poll.
__device__ inline void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
#if __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
#endif
  } while (!done);
}

// ---- the copy engine's bulk copies (sm_90+) ----------------------------------------------------------
#if __CUDA_ARCH__ >= 900
// Makes the inits visible to the async proxy (the copy engine's complete_tx) as well; a block
// launched without a cluster is a cluster of one, so the cluster-scoped fence is the right one.
__device__ inline void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// An arrival that also expects `bytes` more of the phase's copies to land.
__device__ inline void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory by the
// copy engine, one instruction for the whole run, counted against `bar`'s expected bytes as they
// land.
__device__ inline void bulk_copy_to_shared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
#endif

DING_GPU_END
#endif  // DING_GPU_NVIDIA_MMA
