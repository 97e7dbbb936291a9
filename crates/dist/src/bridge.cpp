// The C side of spade-dist: c10d's TCPStore and ProcessGroupGloo (CPU tensors) or
// ProcessGroupNCCL (CUDA tensors; only where build.rs found the CUDA build's headers and
// defined SPADE_WITH_NCCL) behind a few C functions that take tch's tensors (a tch tensor
// handle is a torch::Tensor*). Both groups are c10d Backends, so every collective below serves
// either. Every function catches what libtorch throws and returns it as a malloc'd message
// (NULL on success), so no C++ exception crosses into Rust.

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#ifdef SPADE_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

struct spade_pg {
  c10::intrusive_ptr<c10d::TCPStore> store;
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

// An NCCL group over the GPU `device` of this process (CUDA tensors on that GPU only), its
// ranks meeting through the same TCPStore rendezvous as Gloo's.
char* spade_pg_new_nccl(const char* host, int port, int rank, int world, long timeout_ms,
                        int device, spade_pg** out) {
  return guarded([&] {
#ifdef SPADE_WITH_NCCL
    int seen = static_cast<int>(c10::cuda::device_count());
    if (device < 0 || device >= seen) {
      throw std::runtime_error("an NCCL group on cuda:" + std::to_string(device) +
                               ", but libtorch sees " + std::to_string(seen) + " GPU(s)");
    }
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
    auto g = std::make_unique<spade_pg>();
    g->timeout = std::chrono::milliseconds(timeout_ms);
    g->store = rendezvous(host, port, rank, world, g->timeout);
    auto o = c10d::ProcessGroupNCCL::Options::create();
    o->timeout = g->timeout;
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(g->store, rank, world, o);
    // Bound to its GPU and connected at once: a rank that never comes fails the join, not the
    // first collective, and barriers know which GPU to use.
    c10::Device gpu(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    pg->setBoundDeviceId(gpu);
    pg->eagerConnectSingleDevice(gpu);
    g->pg = pg;
    *out = g.release();
#else
    throw std::runtime_error(
        "this binary's spade-dist was built without NCCL (only the CUDA build, "
        "scripts/build-cuda, links ProcessGroupNCCL)");
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
