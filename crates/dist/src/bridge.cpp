// The C side of spade-dist: c10d's TCPStore and ProcessGroupGloo (CPU tensors) or
// ProcessGroupNCCL (CUDA tensors; only where build.rs found the CUDA build's headers and
// defined SPADE_WITH_NCCL) behind a few C functions that take tch's tensors (a tch tensor
// handle is a torch::Tensor*). Both groups are c10d Backends, so every collective below serves
// either. Every function catches what libtorch throws and returns it as a malloc'd message
// (NULL on success), so no C++ exception crosses into Rust.

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#ifdef SPADE_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

struct spade_pg {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  std::chrono::milliseconds timeout;
};

// Rank 0 serves the store; the others connect. Returns once all `world` ranks have.
static c10::intrusive_ptr<c10d::TCPStore> rendezvous(const char* host, int port, int rank,
                                                     int world,
                                                     std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(port);
  opts.isServer = rank == 0;
  opts.numWorkers = world;
  opts.waitWorkers = true;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
}

static const char* kNoNccl =
    "this binary's spade-dist was built without NCCL (only the CUDA build, scripts/build-cuda, "
    "links it)";

static char* message(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

template <typename F>
static char* guarded(F f) {
  try {
    f();
    return nullptr;
  } catch (const c10::Error& e) {
    return message(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return message(e.what());
  } catch (...) {
    return message("unknown C++ exception");
  }
}

static void wait(spade_pg* g, const c10::intrusive_ptr<c10d::Work>& work) {
  // A rank that died makes this throw once the timeout has passed instead of hanging.
  work->wait(g->timeout);
}

extern "C" {

// host: rank 0's store; local: the address of this rank's own interface for Gloo's pairs
// (on one machine the same as host; on a cluster each node's own).
char* spade_pg_new(const char* host, const char* local, int port, int rank, int world,
                   long timeout_ms, spade_pg** out) {
  return guarded([&] {
    auto g = std::make_unique<spade_pg>();
    g->timeout = std::chrono::milliseconds(timeout_ms);
    g->store = rendezvous(host, port, rank, world, g->timeout);
    auto o = c10d::ProcessGroupGloo::Options::create();
    o->timeout = g->timeout;
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(std::string(local)));
    g->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(g->store, rank, world, o);
    *out = g.release();
  });
}

// 1 where this library was built with ProcessGroupNCCL (the CUDA build), else 0.
int spade_nccl_built() {
#ifdef SPADE_WITH_NCCL
  return 1;
#else
  return 0;
#endif
}

#ifdef SPADE_WITH_NCCL
// `what` ("an NCCL group") on cuda:`device`, refused unless libtorch sees that GPU.
static void check_gpu(int device, const char* what) {
  int seen = static_cast<int>(c10::cuda::device_count());
  if (device < 0 || device >= seen) {
    throw std::runtime_error(std::string(what) + " on cuda:" + std::to_string(device) +
                             ", but libtorch sees " + std::to_string(seen) + " GPU(s)");
  }
}

// ProcessGroupNCCL over `store`, bound to GPU `device` (which the caller checked) and connected
// at once: a rank that never comes fails the join, not the first collective, and barriers know
// which GPU to use.
static void nccl_group(spade_pg* g, c10::intrusive_ptr<c10d::Store> store, int rank, int world,
                       int device) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = g->timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, o);
  c10::Device gpu(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
  pg->setBoundDeviceId(gpu);
  pg->eagerConnectSingleDevice(gpu);
  g->store = store;
  g->pg = pg;
}
#endif

// An NCCL group over the GPU `device` of this process (CUDA tensors on that GPU only), its
// ranks meeting through the same TCPStore rendezvous as Gloo's.
char* spade_pg_new_nccl(const char* host, int port, int rank, int world, long timeout_ms,
                        int device, spade_pg** out) {
  return guarded([&] {
#ifdef SPADE_WITH_NCCL
    auto g = std::make_unique<spade_pg>();
    g->timeout = std::chrono::milliseconds(timeout_ms);
    check_gpu(device, "an NCCL group");  // before waiting for the other ranks
    nccl_group(g.get(), rendezvous(host, port, rank, world, g->timeout), rank, world, device);
    *out = g.release();
#else
    (void)host; (void)port; (void)rank; (void)world; (void)timeout_ms; (void)device; (void)out;
    throw std::runtime_error(kNoNccl);
#endif
  });
}

// An NCCL group of the same ranks as `base` (a Gloo group), meeting through base's store under
// its own prefix: the trainer's tensors go through it on GPU `device` while base keeps the
// host's messages (commands, samples), whose waits are longer than NCCL's watchdog allows.
char* spade_pg_new_nccl_beside(spade_pg* base, int device, spade_pg** out) {
  return guarded([&] {
#ifdef SPADE_WITH_NCCL
    check_gpu(device, "an NCCL group");
    auto g = std::make_unique<spade_pg>();
    g->timeout = base->timeout;
    auto store = c10::make_intrusive<c10d::PrefixStore>("spade-nccl", base->store);
    nccl_group(g.get(), store, base->pg->getRank(), base->pg->getSize(), device);
    *out = g.release();
#else
    (void)base; (void)device; (void)out;
    throw std::runtime_error(kNoNccl);
#endif
  });
}

void spade_pg_free(spade_pg* g) { delete g; }

void spade_message_free(char* m) { std::free(m); }

// op: 0 sum, 1 max, 2 min.
char* spade_pg_all_reduce(spade_pg* g, torch::Tensor* t, int op) {
  return guarded([&] {
    c10d::AllreduceOptions o;
    o.reduceOp = op == 1 ? c10d::ReduceOp::MAX : op == 2 ? c10d::ReduceOp::MIN : c10d::ReduceOp::SUM;
    o.timeout = g->timeout;
    std::vector<at::Tensor> ts = {*t};
    wait(g, g->pg->allreduce(ts, o));
  });
}

// timeout_ms 0: the group's timeout; otherwise this call's own (a rank waiting for rank 0's
// next command while rank 0 plays a step's rollouts waits longer than a collective should).
char* spade_pg_broadcast(spade_pg* g, torch::Tensor* t, int root, long timeout_ms) {
  return guarded([&] {
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms) : g->timeout;
    std::vector<at::Tensor> ts = {*t};
    g->pg->broadcast(ts, o)->wait(o.timeout);
  });
}

// A collective started and not yet waited for: its works, and for the root of a reduce the
// tensors that arrive and are added into `target` at the wait.
struct spade_pending {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<at::Tensor> arrived;
  at::Tensor target;
  std::chrono::milliseconds timeout;
};

static char* finish(spade_pending* p) {
  return guarded([&] {
    for (auto& w : p->works) w->wait(p->timeout);
    p->works.clear();
    for (auto& a : p->arrived) p->target.add_(a);
    p->arrived.clear();
  });
}

// The sum over ranks into root's t (the others' t is left as it was). Point to point: every
// other rank sends its t to root, which adds them in rank order. Gloo's own reduce costs what
// its all-reduce costs (11.3 against 11.0 ms for 12 MB on two CPU ranks, `PROBE=speed` of
// spade-dist-probe), while a tensor sent once is a broadcast's 3.8 ms. With two ranks the
// receive is left running (one buffer) until the wait; with more root takes each sender's in
// turn before returning, so it never holds more than one extra copy.
char* spade_pg_reduce_start(spade_pg* g, torch::Tensor* t, int root, spade_pending** out) {
  return guarded([&] {
    auto p = std::make_unique<spade_pending>();
    p->timeout = g->timeout;
    int rank = g->pg->getRank(), world = g->pg->getSize();
    if (rank != root) {
      std::vector<at::Tensor> mine = {*t};
      p->works.push_back(g->pg->send(mine, root, 0));
    } else if (world == 2) {
      std::vector<at::Tensor> in = {at::empty_like(*t)};
      p->works.push_back(g->pg->recv(in, 1 - root, 0));
      p->arrived.push_back(in[0]);
      p->target = *t;
    } else {
      std::vector<at::Tensor> in = {at::empty_like(*t)};
      for (int r = 0; r < world; ++r) {
        if (r == root) continue;
        wait(g, g->pg->recv(in, r, 0));
        t->add_(in[0]);
      }
    }
    *out = p.release();
  });
}

// Starts a broadcast of root's t into every rank's t.
char* spade_pg_broadcast_start(spade_pg* g, torch::Tensor* t, int root, spade_pending** out) {
  return guarded([&] {
    auto p = std::make_unique<spade_pending>();
    p->timeout = g->timeout;
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = g->timeout;
    std::vector<at::Tensor> ts = {*t};
    p->works.push_back(g->pg->broadcast(ts, o));
    *out = p.release();
  });
}

// Waits for a started collective (the group's timeout each) and finishes it; call once.
char* spade_pending_wait(spade_pending* p) { return finish(p); }

// Frees a pending collective. One never waited for is abandoned (an error path): its works
// hold their own references to the tensors they read and write, so Gloo's threads finish or
// fail them without it.
void spade_pending_free(spade_pending* p) { delete p; }

// out: world x input's numel, contiguous; each rank's input lands in its row.
char* spade_pg_all_gather(spade_pg* g, torch::Tensor* out, torch::Tensor* in) {
  return guarded([&] {
    int world = g->pg->getSize();
    auto rows = out->view({world, -1}).unbind(0);
    std::vector<std::vector<at::Tensor>> outs = {std::vector<at::Tensor>(rows.begin(), rows.end())};
    std::vector<at::Tensor> ins = {in->reshape({-1})};
    c10d::AllgatherOptions o;
    o.timeout = g->timeout;
    wait(g, g->pg->allgather(outs, ins, o));
  });
}

// in: world equal chunks, contiguous; out gets the sum over ranks of chunk `rank`.
char* spade_pg_reduce_scatter(spade_pg* g, torch::Tensor* out, torch::Tensor* in) {
  return guarded([&] {
    int world = g->pg->getSize();
    auto chunks = in->view({world, -1}).unbind(0);
    std::vector<std::vector<at::Tensor>> ins = {std::vector<at::Tensor>(chunks.begin(), chunks.end())};
    std::vector<at::Tensor> outs = {out->view({-1})};
    c10d::ReduceScatterOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = g->timeout;
    wait(g, g->pg->reduce_scatter(outs, ins, o));
  });
}

char* spade_pg_barrier(spade_pg* g) {
  return guarded([&] {
    c10d::BarrierOptions o;
    o.timeout = g->timeout;
    wait(g, g->pg->barrier(o));
  });
}

int spade_pg_rank(spade_pg* g) { return g->pg->getRank(); }
int spade_pg_size(spade_pg* g) { return g->pg->getSize(); }
}

// A raw NCCL communicator joined by an ncclUniqueId that travels out of band (over HTTP): the
// form a peer outside c10d joins, as vLLM's weight-transfer engine does with
// `nccl_unique_id_b64`. Non-blocking NCCL, so joining and every collective give up after the
// timeout instead of hanging on a peer that never came; a communicator that timed out or
// failed is aborted when freed.
struct spade_nccl {
#ifdef SPADE_WITH_NCCL
  ncclComm_t comm = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  // Aborts the communicator: never waits for a peer that may have gone.
  ~spade_nccl();
#endif
};

#ifdef SPADE_WITH_NCCL
using clock_type = std::chrono::steady_clock;

// NCCL's and the CUDA runtime's entry points, looked up in the process: libtorch_cuda.so needs
// libnccl.so.2 and libcudart, so they are loaded wherever the CUDA backend is, from whichever
// directory that machine's torch keeps them in. Linking them here would add two more libraries
// for each machine's loader to find.
struct nccl_api {
  ncclResult_t (*get_unique_id)(ncclUniqueId*);
  ncclResult_t (*init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*async_error)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*abort)(ncclComm_t);
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t);
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  const char* (*error_string)(ncclResult_t);
  const char* (*last_error)(ncclComm_t);
  cudaError_t (*stream_query)(cudaStream_t);
};

template <typename T>
static void look_up(T& f, const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (p == nullptr) {
    throw std::runtime_error(std::string(name) +
                             " is not in this process (libtorch_cuda.so loads libnccl.so.2 and "
                             "libcudart; is this the CUDA build on a machine with them?)");
  }
  f = reinterpret_cast<T>(p);
}

static const nccl_api& nccl() {
  static const nccl_api api = [] {
    nccl_api a{};
    look_up(a.get_unique_id, "ncclGetUniqueId");
    look_up(a.init_rank_config, "ncclCommInitRankConfig");
    look_up(a.async_error, "ncclCommGetAsyncError");
    look_up(a.abort, "ncclCommAbort");
    look_up(a.all_reduce, "ncclAllReduce");
    look_up(a.broadcast, "ncclBroadcast");
    look_up(a.error_string, "ncclGetErrorString");
    look_up(a.last_error, "ncclGetLastError");
    look_up(a.stream_query, "cudaStreamQuery");
    return a;
  }();
  return api;
}

// The current GPU is `device` for the scope's life. Not c10's CUDAGuard: its implementation's
// inline methods call the CUDA runtime directly, which this library does not link.
struct device_scope {
  c10::DeviceIndex before;
  explicit device_scope(int device) : before(c10::cuda::current_device()) {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  }
  ~device_scope() {
    try {
      c10::cuda::set_device(before);
    } catch (...) {
    }
  }
};

spade_nccl::~spade_nccl() {
  if (comm != nullptr) nccl().abort(comm);
}

static std::string nccl_text(ncclComm_t comm, ncclResult_t r) {
  std::string s = nccl().error_string(r);
  const char* last = comm != nullptr ? nccl().last_error(comm) : nullptr;
  if (last != nullptr && last[0] != '\0') s += std::string(" (") + last + ")";
  return s;
}

static void nccl_call(ncclComm_t comm, ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw std::runtime_error(std::string(what) + ": " + nccl_text(comm, r));
  }
}

// Throws what the communicator reports, unless it is fine or still working.
static bool in_progress(ncclComm_t comm, const char* what) {
  ncclResult_t state = ncclSuccess;
  nccl_call(comm, nccl().async_error(comm, &state), what);
  if (state != ncclSuccess && state != ncclInProgress) {
    throw std::runtime_error(std::string(what) + ": " + nccl_text(comm, state));
  }
  return state == ncclInProgress;
}

// Until the communicator has nothing in progress (its init, or the enqueue of a collective on
// a non-blocking communicator), or the deadline.
static void settle(ncclComm_t comm, clock_type::time_point deadline, const char* what,
                   long timeout_ms) {
  while (in_progress(comm, what)) {
    if (clock_type::now() > deadline) {
      throw std::runtime_error(std::string(what) + ": no answer from the other ranks within " +
                               std::to_string(timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

static ncclDataType_t nccl_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ncclFloat32;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kDouble: return ncclFloat64;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default:
      throw std::runtime_error(std::string("NCCL does not carry tensors of ") +
                               c10::toString(t.scalar_type()));
  }
}

static void nccl_tensor(spade_nccl* c, const at::Tensor& t) {
  if (!t.is_cuda() || t.get_device() != c->device) {
    throw std::runtime_error("the tensor is on " + t.device().str() +
                             ", the communicator's GPU is cuda:" + std::to_string(c->device));
  }
  if (!t.is_contiguous()) throw std::runtime_error("the tensor is not contiguous");
}

// Runs `enqueue` on the device's current stream (where the tensor was written), then waits,
// polling, until the stream has passed it or the timeout has.
template <typename F>
static void nccl_run(spade_nccl* c, const char* what, F enqueue) {
  device_scope on(c->device);
  auto stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(c->device));
  auto deadline = clock_type::now() + c->timeout;
  long ms = static_cast<long>(c->timeout.count());
  nccl_call(c->comm, enqueue(stream.stream()), what);
  settle(c->comm, deadline, what, ms);
  for (;;) {
    cudaError_t q = nccl().stream_query(stream.stream());
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      throw std::runtime_error(std::string(what) + ": the stream failed (CUDA error " +
                               std::to_string(static_cast<int>(q)) + ")");
    }
    in_progress(c->comm, what);
    if (clock_type::now() > deadline) {
      throw std::runtime_error(std::string(what) + ": not finished within " + std::to_string(ms) +
                               " ms (a rank stopped answering)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// A collective `op(data, count, type, stream)` on t in place.
template <typename F>
static void in_place(spade_nccl* c, torch::Tensor* t, const char* what, F op) {
  nccl_tensor(c, *t);
  auto type = nccl_type(*t);
  void* p = t->data_ptr();
  size_t n = static_cast<size_t>(t->numel());
  nccl_run(c, what, [&](cudaStream_t s) { return op(p, n, type, s); });
}
#endif

extern "C" {

// out: the 128 bytes of a fresh ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
char* spade_nccl_unique_id(unsigned char* out) {
  return guarded([&] {
#ifdef SPADE_WITH_NCCL
    static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
    ncclUniqueId id;
    nccl_call(nullptr, nccl().get_unique_id(&id), "ncclGetUniqueId");
    std::memcpy(out, &id, sizeof(id));
#else
    (void)out;
    throw std::runtime_error(kNoNccl);
#endif
  });
}

// Joins rank `rank` of `world` on GPU `device`; returns once every rank has joined (each
// calls ncclCommInitRank with the same id at about the same time) or fails after timeout_ms.
char* spade_nccl_join(const unsigned char* id, int world, int rank, int device,
                      long timeout_ms, spade_nccl** out) {
  return guarded([&] {
#ifdef SPADE_WITH_NCCL
    check_gpu(device, "an NCCL communicator");
    device_scope on(device);
    auto c = std::make_unique<spade_nccl>();
    c->device = device;
    c->timeout = std::chrono::milliseconds(timeout_ms);
    ncclUniqueId uid;
    std::memcpy(&uid, id, sizeof(uid));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    auto deadline = clock_type::now() + c->timeout;
    // A failure below frees `c`, which aborts whatever NCCL made of it.
    ncclResult_t r = nccl().init_rank_config(&c->comm, world, uid, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      throw std::runtime_error("ncclCommInitRankConfig: " + nccl_text(nullptr, r));
    }
    settle(c->comm, deadline, "joining the NCCL communicator", timeout_ms);
    *out = c.release();
#else
    (void)id; (void)world; (void)rank; (void)device; (void)timeout_ms; (void)out;
    throw std::runtime_error(kNoNccl);
#endif
  });
}

// The sum over ranks into every rank's t (CUDA, the communicator's GPU, contiguous).
char* spade_nccl_all_reduce_sum(spade_nccl* c, torch::Tensor* t) {
  return guarded([&] {
#ifdef SPADE_WITH_NCCL
    in_place(c, t, "ncclAllReduce", [&](void* p, size_t n, ncclDataType_t type, cudaStream_t s) {
      return nccl().all_reduce(p, p, n, type, ncclSum, c->comm, s);
    });
#else
    (void)c; (void)t;
    throw std::runtime_error(kNoNccl);
#endif
  });
}

// root's t into every rank's t.
char* spade_nccl_broadcast(spade_nccl* c, torch::Tensor* t, int root) {
  return guarded([&] {
#ifdef SPADE_WITH_NCCL
    in_place(c, t, "ncclBroadcast", [&](void* p, size_t n, ncclDataType_t type, cudaStream_t s) {
      return nccl().broadcast(p, p, n, type, root, c->comm, s);
    });
#else
    (void)c; (void)t; (void)root;
    throw std::runtime_error(kNoNccl);
#endif
  });
}

// Aborts the communicator (never waits for a peer that may have gone) and frees it.
void spade_nccl_free(spade_nccl* c) { delete c; }
}

