// The Communicator over NCCL: one process per GPU, ranks found through the launch environment
// (launch_env.h), NCCL's unique id handed from rank 0 to the others through the TCP rendezvous
// (tcp_store.h). Built only with ALPHA_WITH_NCCL (CMake: ALPHA_NCCL, on by default where NCCL is found).
//
// Streams: collectives run on a stream of their own, each waiting for the work already queued on the
// device's default stream, so packing the next gradient bucket overlaps the collective of the last one.
// Failures: the communicator is created non-blocking, and synchronize() polls an event recorded on its stream
// (synchronize_marked(), the one mark_issued() recorded) and ncclCommGetAsyncError; past the timeout, or on an
// asynchronous error, it asks the rendezvous which rank failed (a closed connection means a dead process; the rank
// furthest behind, a hung one), aborts the communicator (ncclCommAbort) and raises RankFailureError naming that rank.
//
// Reductions: NCCL's sums depend on the algorithm (ring, tree, ...) and protocol it picks per message size, the
// same for the same sizes, GPUs and NCCL version. DataParallel's deterministic option needs none of them: it
// exchanges the shards (an all-to-all, a copy) and adds them in rank order itself.
//
// Gather buffers (gather_buffer): ncclMemAlloc memory registered as a symmetric window, which NCCL 2.28 can
// all-gather and all-to-all with the copy engines when the communicator's CTA policy allows (NCCL_CTA_POLICY=2,
// "zero CTAs", the user's choice: docs/PERFORMANCE.md measures it, docs/DISTRIBUTED.md says why it is not the
// default). Windows are deregistered before the communicator is destroyed; a buffer
// that outlives it only frees its memory.
#pragma once
#include <chrono>
#include <memory>

#include "alpha/distributed/communicator.h"
#include "alpha/distributed/launch_env.h"
#include "alpha/distributed/tcp_store.h"

namespace alpha::distributed {

// Whether this build has NCCL.
bool nccl_built();

// NCCL's environment, set before a communicator is created: NVLink multicast off (NCCL_NVLS_ENABLE=0)
// unless the user set it.
void set_nccl_environment();

// Joins the rendezvous (tcp_store.h) and creates the communicator of this rank on cuda:<local_rank>.
// ConfigError when the build has no NCCL; IOError when the rendezvous fails; BackendError naming the NCCL
// call, or RankFailureError when a peer does not join within the timeout.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, std::chrono::milliseconds timeout);

}  // namespace alpha::distributed
