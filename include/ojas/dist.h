/* ojas dist: the process group of a data-parallel run and its collectives.
 *
 * A process group comes from the MPI launcher's environment (mpirun,
 * Slurm srun with PMIx/PMI): MPI is initialised and the group is
 * MPI_COMM_WORLD. A process started without a launcher is a group of one
 * that runs no collective at all. MPI is linked when ojas is built with
 * OJAS_MPI (the default when an MPI is found); a process launched by MPI
 * in a build without it is refused, never run as N independent copies.
 *
 * Collectives move the bytes of tensors of the engine the group is bound
 * to (oj_dist_bind): for a CPU engine through MPI on host memory, for a
 * CUDA engine through NCCL on device memory (the communicator is made
 * from an ncclUniqueId that rank 0 creates and broadcasts over MPI; NCCL
 * is linked into the CUDA backend module). There is no fallback between
 * the two: a CUDA engine whose module has no NCCL is refused. Small
 * control records (losses, flags, checkpoint shards) always go through
 * MPI on the host.
 *
 * No collective reduces: they only move bytes, and the caller sums what
 * it received in a fixed (rank) order with the engine's own ops. That is
 * what makes a run bit-identical across world sizes (docs/distributed.md).
 *
 * Failures: every MPI wait polls with a deadline (the group's timeout).
 * A record exchange that times out names the ranks it heard nothing from;
 * then the whole job is ended with MPI_Abort, so no rank hangs. A rank
 * that dies is reported by the launcher (mpirun names its rank), which
 * ends the others. */
#ifndef OJAS_DIST_H
#define OJAS_DIST_H

#include "ojas/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oj_dist oj_dist;

/* True when this ojas was built with MPI (OJAS_MPI). */
bool oj_dist_have_mpi(void);

/* True when the environment says a launcher started this process: an
 * MPI launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE set), or one
 * that sets RANK and WORLD_SIZE (torchrun's names, a group without MPI). */
bool oj_dist_launched(void);
/* True when the group runs on MPI (host records, ZeRO-1's messages, the
 * CPU engines' collectives); false for a group of one and for a group
 * from RANK/WORLD_SIZE, whose records go through NCCL once bound. */
bool oj_dist_mpi(const oj_dist *d);
/* True when the group's MPI was initialised with MPI_THREAD_MULTIPLE
 * (oj_dist_init asks for it), so that the NCCL watchdog thread may end
 * the job with MPI_Abort; false without MPI or when the MPI library gave
 * less (the watchdog then ends its own process, and the launcher the
 * job). */
bool oj_dist_mpi_threads(const oj_dist *d);

/* Join the launcher's process group, or make a group of one when no
 * launcher started this process. Without an MPI launcher, RANK and
 * WORLD_SIZE (with LOCAL_RANK, and MASTER_ADDR / MASTER_PORT when
 * WORLD_SIZE > 1: rank 0's host and a free TCP port on it) make a group
 * without MPI: only CUDA engines can bind it; at oj_dist_bind rank 0's
 * ncclUniqueId reaches the others over a TCP rendezvous on that address
 * (128 bytes, with the timeout), and its host records (oj_dist_exchange,
 * oj_dist_barrier) then go through NCCL; oj_dist_send / oj_dist_recv
 * (ZeRO-1's checkpoints) need MPI. timeout_s (> 0) bounds every wait for
 * other ranks. On success *out owns the group (oj_dist_free). Errors:
 * OJ_ERR_UNSUPPORTED when launched by MPI but built without it;
 * OJ_ERR_DEVICE when MPI_Init_thread fails; OJ_ERR_INVALID_ARGUMENT for a
 * timeout <= 0 or RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT that do
 * not make a group (named). At most one group per process: MPI is
 * initialised once. */
oj_status oj_dist_init(double timeout_s, oj_dist **out, oj_error *err);
/* Leave the group: the NCCL communicator is destroyed and MPI finalized
 * (MPI_Finalize waits for the other ranks to finalize too). NULL is a
 * no-op. */
void oj_dist_free(oj_dist *d);
/* End every rank of the job now (MPI_Abort with `code`; exit(code) in a
 * group of one). For errors after which the ranks can no longer agree. */
void oj_dist_abort(oj_dist *d, int code);

int oj_dist_rank(const oj_dist *d);
int oj_dist_world_size(const oj_dist *d);
/* This rank's index among the ranks on its machine (MPI_COMM_TYPE_SHARED),
 * 0 in a group of one: the trainer's CUDA ranks use device index + this. */
int oj_dist_local_rank(const oj_dist *d);
/* True when collectives run (a launched group, even of world size 1). */
bool oj_dist_active(const oj_dist *d);
/* "none" (group of one), "mpi" or "nccl": the transport of the tensor
 * collectives after oj_dist_bind. */
const char *oj_dist_transport(const oj_dist *d);

/* OJ_OK when d can bind an engine on `device` (oj_dist_bind refuses the
 * rest with this error); OJ_ERR_UNSUPPORTED with the reason in err for a
 * CPU device in a group from RANK/WORLD_SIZE, which has no MPI for the
 * CPU collectives. A NULL group (one process) takes any device. For
 * refusing a run before it makes anything (the trainer's out_dir). */
oj_status oj_dist_check_device(const oj_dist *d, oj_device device, oj_error *err);

/* Bind the group's tensor collectives to eng: MPI for a CPU engine, NCCL
 * for a CUDA engine (the communicator is created now, collectively: every
 * rank must call this). OJ_ERR_UNSUPPORTED when the CUDA module was built
 * without NCCL, or for a CPU engine in a group without MPI (named);
 * OJ_ERR_DEVICE when NCCL fails, OJ_ERR_IO when the rendezvous of a group
 * without MPI fails (named), OJ_ERR_STATE when already bound. A group
 * that is not active binds without doing anything. */
oj_status oj_dist_bind(oj_dist *d, oj_engine *eng, oj_error *err);

/* ---- host records (MPI; every rank calls each, in the same order) */

/* Every rank's `nbytes` bytes at `mine` into all[rank * nbytes ...]
 * (all: world_size * nbytes bytes, host). `what` names the exchange in a
 * timeout message, which names each rank not heard from, and with
 * OJAS_DIST_TRACE=1 on stderr as it starts (a group of more than one). */
oj_status oj_dist_exchange(oj_dist *d, const void *mine, size_t nbytes, void *all,
                           const char *what, oj_error *err);
/* Send `nbytes` host bytes to rank `to` / receive them from `from` (one
 * message; the receiver learns the size: *buf is malloc'd, free() it). */
oj_status oj_dist_send(oj_dist *d, int to, const void *buf, size_t nbytes, oj_error *err);
oj_status oj_dist_recv(oj_dist *d, int from, void **buf, size_t *nbytes, oj_error *err);
/* Wait until every rank got here (e.g. rank 0 finished a checkpoint). */
oj_status oj_dist_barrier(oj_dist *d, const char *what, oj_error *err);

/* ---- tensor collectives on the bound engine (contiguous tensors of one
 * dtype on its device; every rank calls each with the same shapes) */

/* send [W * S] -> recv [W * S]: recv's block q (elements q*S .. q*S+S)
 * is block `rank` of rank q's send (MPI_Alltoall, ncclSend/ncclRecv). */
oj_status oj_dist_alltoall(oj_dist *d, oj_tensor *send, oj_tensor *recv, oj_error *err);
/* mine [S] -> all [W * S], block q = rank q's mine (MPI_Allgather,
 * ncclAllGather). */
oj_status oj_dist_allgather(oj_dist *d, oj_tensor *mine, oj_tensor *all, oj_error *err);
/* all [N] in place: segment q (elements offsets[q] .. offsets[q + 1],
 * offsets: W + 1 non-decreasing values, offsets[W] = N) is taken from rank
 * q's all (MPI_Allgatherv in place; one ncclBroadcast per rank). */
oj_status oj_dist_allgatherv(oj_dist *d, oj_tensor *all, const int64_t *offsets, oj_error *err);

/* all [N] in place: the elementwise sum of every rank's `all` (f32 or
 * f64 through MPI, also bf16 and f16 through NCCL; the order of the
 * additions is the library's, so the bits may depend on the world size:
 * the trainer uses it where that is allowed, docs/distributed.md). MPI:
 * MPI_Iallreduce, complete on return (a wait past the timeout ends the
 * job). NCCL: ncclAllReduce enqueued on the communicator's own stream,
 * after the work the engine's stream holds now (so the engine's stream
 * runs on: the trainer's backward overlaps it), and not waited for:
 * oj_dist_join before the engine reads the sums, and arm the watchdog
 * with oj_dist_watch after the last one. Errors as the other
 * collectives, OJ_ERR_DTYPE for another dtype. A group of one through
 * MPI, or not active, returns at once. */
oj_status oj_dist_allreduce_sum(oj_dist *d, oj_tensor *all, oj_error *err);
/* NCCL: the engine's stream waits, on the device, for every
 * oj_dist_allreduce_sum queued so far (no host wait). A no-op for MPI. */
oj_status oj_dist_join(oj_dist *d, oj_error *err);
/* NCCL: what the bound engine's stream holds now (the collectives just
 * enqueued) must finish within the group's timeout; past it, or on an
 * asynchronous NCCL error, a watchdog thread prints a message naming
 * `what` and this rank, aborts the communicator and ends the job
 * (MPI_Abort, or _exit(3) without MPI). Costs one event record, no host
 * wait. A no-op for MPI (its waits are bounded in place) and unbound or
 * inactive groups. */
oj_status oj_dist_watch(oj_dist *d, const char *what, oj_error *err);

#ifdef __cplusplus
}
#endif
#endif /* OJAS_DIST_H */
